//! Copy buffers, pooled per thread: a connection takes one only while data
//! flows, so reuse saves an allocation (and nothing is zeroed: reads fill
//! the spare capacity) on every burst.

use std::cell::RefCell;

/// Size of one buffer.
pub const SIZE: usize = 16 * 1024;

/// Buffers kept per thread; more are freed.
const KEEP: usize = 64;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with [`SIZE`] bytes of capacity.
pub fn take() -> Vec<u8> {
    POOL.with_borrow_mut(Vec::pop).unwrap_or_else(|| Vec::with_capacity(SIZE))
}

/// Returns a buffer to this thread's pool.
pub fn give(mut buf: Vec<u8>) {
    if buf.capacity() != SIZE {
        return;
    }
    buf.clear();
    POOL.with_borrow_mut(|pool| {
        if pool.len() < KEEP {
            pool.push(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_buffer_is_handed_out_again_empty() {
        let mut buf = take();
        assert_eq!((buf.len(), buf.capacity()), (0, SIZE));
        buf.extend_from_slice(b"left over");
        let ptr = buf.as_ptr();
        give(buf);
        let again = take();
        assert_eq!((again.as_ptr(), again.len()), (ptr, 0));
    }

    #[test]
    fn the_pool_is_bounded() {
        let many: Vec<_> = (0..KEEP + 10).map(|_| take()).collect();
        many.into_iter().for_each(give);
        assert_eq!(POOL.with_borrow(Vec::len), KEEP);
    }
}
