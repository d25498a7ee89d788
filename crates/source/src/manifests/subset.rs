//! The plain subset of YAML most manifests are written in, read straight
//! into a tree: block mappings and sequences indented with spaces, plain
//! and single-line quoted scalars, `{}` and `[]`, full-line comments.
//!
//! The full YAML parser (serde-saphyr) reads about 3 MB/s, most of it spent
//! on events and their bookkeeping; this reads the same documents ten times
//! faster. It is only a shortcut: it gives up (returns `None`) on anything
//! outside the subset or anything it is not sure of (anchors, aliases,
//! tags, block and multi-line scalars, flow collections with content,
//! inline comments, tabs, duplicate keys, scalars whose type it does not
//! resolve the way serde-saphyr does), and the caller then reads the
//! document with the full parser, which also reports every error. So a
//! document gives the same tree either way, and nothing here needs the
//! alias limits of [`super::budget`]: there are no aliases.
//!
//! Pure: no I/O.

use serde_json::{Map, Number, Value};

/// The document's tree, or `None` when the full parser must read it.
pub fn tree(text: &str) -> Option<Value> {
    // A byte order mark is not part of the first key.
    if text.starts_with('\u{feff}') {
        return None;
    }
    let mut lines = Vec::new();
    for line in text.lines() {
        let content = line.trim_start_matches(' ');
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        // Tabs, carriage returns and inline comments change how a line
        // reads, and control characters (which YAML does not allow) and
        // other line breaks are errors or line ends: the full parser knows.
        if line.bytes().any(|b| b < b' ' || b == 0x7f || b == b'#') || (!line.is_ascii() && line.chars().any(unusual)) {
            return None;
        }
        lines.push(Line { indent: line.len() - content.len(), text: content.trim_end_matches(' ') });
    }
    let mut reader = Reader { lines, next: 0 };
    // The root is a mapping at the first column (a kubectl dump, a
    // manifest); anything else goes to the full parser.
    let first = reader.peek()?;
    if first.indent != 0 || first.is_item() {
        return None;
    }
    let root = reader.mapping(0)?;
    if reader.peek().is_some() {
        return None;
    }
    Some(root)
}

/// C1 controls (and NEL), line and paragraph separators, byte order marks
/// and non-characters.
fn unusual(c: char) -> bool {
    matches!(c, '\u{80}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}')
}

#[derive(Clone, Copy)]
struct Line<'a> {
    indent: usize,
    /// Without the indentation and trailing spaces; never empty.
    text: &'a str,
}

impl<'a> Line<'a> {
    /// A sequence item: `- value` or `-`.
    fn is_item(&self) -> bool {
        self.text == "-" || self.text.starts_with("- ")
    }

    /// `key: value` split into the key and the value (empty for `key:`),
    /// or `None` when the line is no mapping entry.
    fn entry(&self) -> Option<(&'a str, &'a str)> {
        let text = self.text;
        if let Some(key) = text.strip_suffix(':')
            && !key.contains(": ")
        {
            return Some((key, ""));
        }
        let at = text.find(": ")?;
        Some((&text[..at], text[at + 2..].trim_start_matches(' ')))
    }
}

struct Reader<'a> {
    lines: Vec<Line<'a>>,
    next: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<Line<'a>> {
        self.lines.get(self.next).copied()
    }

    /// The entries of a block mapping whose keys are at `indent`.
    fn mapping(&mut self, indent: usize) -> Option<Value> {
        let mut map = Map::new();
        while let Some(line) = self.peek().filter(|l| l.indent == indent && !l.is_item()) {
            let (key, value) = line.entry()?;
            let key = key_of(key)?;
            self.next += 1;
            let value = if value.is_empty() { self.nested(indent, true)? } else { self.inline(value, indent)? };
            // Duplicate keys: the full parser decides what they mean.
            if map.insert(key, value).is_some() {
                return None;
            }
        }
        self.ended(indent)?;
        Some(Value::Object(map))
    }

    /// The items of a block sequence whose dashes are at `indent`.
    fn sequence(&mut self, indent: usize) -> Option<Value> {
        let mut items = Vec::new();
        while let Some(line) = self.peek().filter(|l| l.indent == indent && l.is_item()) {
            let rest = line.text[1..].trim_start_matches(' ');
            if rest.is_empty() {
                self.next += 1;
                items.push(self.nested(indent, false)?);
                continue;
            }
            if rest == "-" || rest.starts_with("- ") {
                return None;
            }
            let column = indent + line.text.len() - rest.len();
            let inline = Line { indent: column, text: rest };
            if inline.entry().is_some() && !rest.starts_with(['"', '\'']) {
                // `- key: value` opens a mapping at the key's column.
                self.lines[self.next] = inline;
                items.push(self.mapping(column)?);
            } else {
                self.next += 1;
                items.push(self.inline(rest, indent)?);
            }
        }
        self.ended(indent)?;
        Some(Value::Array(items))
    }

    /// What follows `key:` or `-` on the lines below: a more indented
    /// block, a sequence at the key's own indentation (`key:\n- a`), or
    /// nothing (null).
    fn nested(&mut self, indent: usize, same_indent_sequence: bool) -> Option<Value> {
        let Some(line) = self.peek() else { return Some(Value::Null) };
        if line.indent > indent {
            return if line.is_item() {
                self.sequence(line.indent)
            } else if line.entry().is_some() {
                self.mapping(line.indent)
            } else {
                // A scalar on a line of its own.
                None
            };
        }
        if same_indent_sequence && line.indent == indent && line.is_item() {
            return self.sequence(indent);
        }
        Some(Value::Null)
    }

    /// A value written on its key's (or dash's) line. A more indented line
    /// below it would continue it: the full parser reads those.
    fn inline(&mut self, text: &str, indent: usize) -> Option<Value> {
        if self.peek().is_some_and(|l| l.indent > indent) {
            return None;
        }
        scalar(text)
    }

    /// After a block: the next line must belong to an enclosing block.
    fn ended(&self, indent: usize) -> Option<()> {
        match self.peek() {
            Some(line) if line.indent > indent => None,
            _ => Some(()),
        }
    }
}

/// A plain key that reads as a string.
fn key_of(key: &str) -> Option<String> {
    // `<<` merges another mapping in; quoted keys are rare enough to leave.
    let special = key.starts_with(INDICATORS) || key.starts_with(['-', '?', ':', '"', '\'']) || key == "<<";
    if key.is_empty() || key.ends_with(' ') || special {
        return None;
    }
    match plain(key)? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// Characters that make a node other than a plain scalar when they start it.
const INDICATORS: [char; 14] = ['[', ']', '{', '}', ',', '#', '&', '*', '!', '|', '>', '%', '@', '`'];

/// A scalar (or empty collection) written on one line.
fn scalar(text: &str) -> Option<Value> {
    match text {
        "{}" => return Some(Value::Object(Map::new())),
        "[]" => return Some(Value::Array(Vec::new())),
        _ => {}
    }
    if let Some(rest) = text.strip_prefix('"') {
        return double_quoted(rest).map(Value::String);
    }
    if let Some(rest) = text.strip_prefix('\'') {
        return single_quoted(rest).map(Value::String);
    }
    let indicator = text.starts_with(INDICATORS)
        || matches!(text, "-" | "?" | ":")
        || text.starts_with("- ")
        || text.starts_with("? ")
        || text.starts_with(": ");
    if indicator || text.contains(": ") || text.ends_with(':') {
        return None;
    }
    plain(text)
}

/// `"..."` on one line, with the common escapes; `rest` is after the
/// opening quote.
fn double_quoted(rest: &str) -> Option<String> {
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return rest[at + 1..].is_empty().then_some(out),
            '\\' => match chars.next()?.1 {
                '\\' => out.push('\\'),
                '"' => out.push('"'),
                '/' => out.push('/'),
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'u' => {
                    let hex = rest.get(at + 2..at + 6)?;
                    out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
                    for _ in 0..4 {
                        chars.next();
                    }
                }
                _ => return None,
            },
            _ => out.push(c),
        }
    }
    // No closing quote: the scalar continues on the next line.
    None
}

/// `'...'` on one line (`''` is a quote); `rest` is after the opening quote.
fn single_quoted(rest: &str) -> Option<String> {
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c != '\'' {
            out.push(c);
        } else if chars.peek().is_some_and(|(_, next)| *next == '\'') {
            chars.next();
            out.push('\'');
        } else {
            return rest[at + 1..].is_empty().then_some(out);
        }
    }
    None
}

/// A plain scalar resolved as serde-saphyr resolves it for an untyped
/// value (YAML 1.1 booleans, YAML 1.2 nulls and integers); `None` for the
/// spellings whose reading is subtle (floats, leading zeros, radix
/// prefixes, underscores, overflow).
fn plain(text: &str) -> Option<Value> {
    if matches!(text, "~" | "null" | "Null" | "NULL") {
        return Some(Value::Null);
    }
    let is = |word: &str| text.eq_ignore_ascii_case(word);
    if text.len() <= 5 {
        if is("true") || is("yes") || is("y") || is("on") {
            return Some(Value::Bool(true));
        }
        if is("false") || is("no") || is("n") || is("off") {
            return Some(Value::Bool(false));
        }
    }
    let (negative, unsigned) = match text.strip_prefix(['+', '-']) {
        Some(rest) => (text.starts_with('-'), rest),
        None => (false, text),
    };
    // Neither an integer nor a float can start otherwise (`.inf`, `.nan`
    // start with a dot).
    if !unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Some(Value::String(text.to_owned()));
    }
    // A character no number has, or two dots (an address): a string.
    let numeric = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-');
    if !unsigned.bytes().all(numeric) || unsigned.bytes().filter(|b| *b == b'.').count() > 1 {
        return Some(Value::String(text.to_owned()));
    }
    let decimal = unsigned.bytes().all(|b| b.is_ascii_digit()) && (unsigned == "0" || !unsigned.starts_with('0'));
    if !decimal || text.starts_with('+') {
        return None;
    }
    if negative {
        let value: i64 = text.parse().ok()?;
        Some(Value::Number(Number::from(value)))
    } else {
        let value: u64 = unsigned.parse().ok()?;
        Some(Value::Number(Number::from(value)))
    }
}

#[cfg(test)]
mod tests;
