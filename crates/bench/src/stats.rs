//! Summaries of repeated measurements: median, min, max, percentiles.
//!
//! Timings on shared machines are noisy, so the report leads with medians
//! and always says how many samples a number stands for.

use serde::{Deserialize, Serialize};

/// Median, extremes and count of a set of samples (in the samples' unit).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Summary {
    /// `None` for no samples; NaNs are ignored.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let sorted = sorted(samples);
        let (min, max) = (*sorted.first()?, *sorted.last()?);
        Some(Summary { median: quantile_sorted(&sorted, 0.5), min, max, n: sorted.len() })
    }
}

/// The `q`-quantile (0..=1) with linear interpolation between the two
/// nearest ranks; `None` for no samples.
pub fn quantile(samples: &[f64], q: f64) -> Option<f64> {
    let sorted = sorted(samples);
    (!sorted.is_empty()).then(|| quantile_sorted(&sorted, q))
}

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    sorted.sort_by(f64::total_cmp);
    sorted
}

fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let rank = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// `a / b` of two medians, `None` when either is missing or `b` is zero.
pub fn ratio(a: Option<Summary>, b: Option<Summary>) -> Option<f64> {
    let (a, b) = (a?, b?);
    (b.median > 0.0).then(|| a.median / b.median)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(Summary::of(&[3.0, 1.0, 2.0]).map(|s| s.median), Some(2.0));
        assert_eq!(Summary::of(&[4.0, 1.0, 3.0, 2.0]).map(|s| s.median), Some(2.5));
    }

    #[test]
    fn summary_keeps_extremes_and_count_and_skips_nan() {
        let s = Summary::of(&[5.0, f64::NAN, -1.0, 2.0]).expect("samples");
        assert_eq!((s.min, s.max, s.n), (-1.0, 5.0, 3));
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[f64::NAN]), None);
    }

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&samples, 0.0), Some(1.0));
        assert_eq!(quantile(&samples, 1.0), Some(100.0));
        assert!((quantile(&samples, 0.99).expect("samples") - 99.01).abs() < 1e-9);
        assert_eq!(quantile(&[7.0], 0.99), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn ratio_of_medians() {
        let s = Summary::of(&[1000.0, 2000.0, 3000.0]);
        let half = Summary::of(&[1000.0]);
        assert_eq!(ratio(s, half), Some(2.0));
        assert_eq!(ratio(s, None), None);
        assert_eq!(ratio(s, Summary::of(&[0.0])), None);
    }
}
