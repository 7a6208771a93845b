//! JSON strings, dict keys and field names: escaped while they are copied.

use crate::text::TextOut;

/// A dict key or field name and its `:`, with one more `$` in front of a name that starts with
/// `$`, so that it cannot be taken for a tag.
pub fn escaped_key<O: TextOut + ?Sized>(out: &mut O, key: &str) {
    quoted(out, if key.starts_with('$') { "\"$" } else { "\"" }, key, "\":");
}

/// A JSON string.
#[inline]
pub fn string<O: TextOut + ?Sized>(out: &mut O, s: &str) {
    quoted(out, "\"", s, "\"");
}

/// `opening`, the escaped `s` and `closing`. Room for all three is made at once, so that a
/// string with nothing to escape (most of them) is one reservation and a copy. Inlined, so that
/// the few bytes of `opening` and `closing` are stored as constants, not copied by a call.
#[inline(always)]
fn quoted<O: TextOut + ?Sized>(out: &mut O, opening: &str, s: &str, closing: &str) {
    let bytes = s.as_bytes();
    let (n, open, close) = (bytes.len(), opening.len(), closing.len());
    out.reserve(open + n + close);
    // SAFETY: `open + n + close` bytes were reserved: the opening, then at most `n` bytes that
    // `copy_plain` stores, then the closing only when all `n` were plain. The bytes kept are
    // whole strs or end before an ASCII byte, so the text stays UTF-8.
    let plain = unsafe {
        let dst = out.end();
        store_short(opening, dst);
        let plain = copy_plain(bytes, dst.add(open));
        if plain == n {
            store_short(closing, dst.add(open + n));
            out.advance(open + n + close);
            return;
        }
        out.advance(open + plain);
        plain
    };
    escape_into(out, &s[plain..]);
    out.push_str(closing);
}

/// Stores the bytes of `piece`, a few at most, one by one: a copy of a length not known when
/// compiling is a call to memcpy.
///
/// # Safety
/// `dst` must be valid for `piece.len()` writes.
#[inline(always)]
unsafe fn store_short(piece: &str, dst: *mut u8) {
    for (i, &byte) in piece.as_bytes().iter().enumerate() {
        // SAFETY: the caller's guarantee.
        unsafe { *dst.add(i) = byte };
    }
}

/// JSON string contents: `"`, `\` and control characters escaped, everything else as UTF-8.
pub(super) fn escape_into<O: TextOut + ?Sized>(out: &mut O, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    loop {
        start += append_plain(out, &bytes[start..]);
        let Some(&byte) = bytes.get(start) else { return };
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b => {
                out.push_fmt(format_args!("\\u{b:04x}"));
            }
        }
        start += 1;
    }
}

/// Whether JSON strings escape `byte`.
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// The high bit of each byte of `word` that JSON strings escape: below 0x20, or equal to `"` or
/// `\` (a byte is equal when the xor makes it zero). Borrows can only mark bytes above one
/// truly marked, so the lowest mark is exact, and a word without a byte to escape has none.
pub(super) fn escape_marks(word: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES * 0x80;
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    below(word, 0x20) | below(word ^ (ONES * u64::from(b'"')), 1) | below(word ^ (ONES * u64::from(b'\\')), 1)
}

/// Appends the longest start of `bytes` that needs no escape, and returns its length.
pub(super) fn append_plain<O: TextOut + ?Sized>(out: &mut O, bytes: &[u8]) -> usize {
    out.reserve(bytes.len());
    // SAFETY: `bytes.len()` bytes were reserved, and the bytes kept end before an ASCII byte or
    // at the end of `bytes`, a whole str, so the text stays UTF-8.
    unsafe {
        let plain = copy_plain(bytes, out.end());
        out.advance(plain);
        plain
    }
}

/// Stores the bytes of `bytes` at `dst` up to the first one that needs an escape, and returns
/// how many that is. Eight bytes at a time, each word stored as soon as it is tested: most
/// strings need no escape, and testing them first and copying them after read each byte twice
/// (and called memcpy for the longer ones). A word whose test fails is stored whole; the bytes
/// past the returned count are scratch. Strings of four to seven bytes are tested as one word
/// made of their first and last four (which overlap).
///
/// # Safety
/// `dst` must be valid for `bytes.len()` writes.
#[inline]
unsafe fn copy_plain(bytes: &[u8], dst: *mut u8) -> usize {
    let n = bytes.len();
    let src = bytes.as_ptr();
    // SAFETY: every read is within `bytes` and every store within the `n` bytes at `dst`: words
    // at offsets `i` with `i + 8 <= n` (the last one at `n - 8`), halves at 0 and `n - 4` when
    // `n >= 4`, single bytes below `n`.
    unsafe {
        if n < 8 {
            if n >= 4 {
                let (low, high) = (std::ptr::read_unaligned(src.cast::<u32>()), std::ptr::read_unaligned(src.add(n - 4).cast::<u32>()));
                if escape_marks(u64::from(low) | u64::from(high) << 32) == 0 {
                    std::ptr::write_unaligned(dst.cast::<u32>(), low);
                    std::ptr::write_unaligned(dst.add(n - 4).cast::<u32>(), high);
                    return n;
                }
            }
            for (i, &byte) in bytes.iter().enumerate() {
                if needs_escape(byte) {
                    return i;
                }
                *dst.add(i) = byte;
            }
            return n;
        }
        // Each word is stored, then tested; returns how many of its bytes are kept.
        let copy_word = |i: usize| {
            let word = std::ptr::read_unaligned(src.add(i).cast::<[u8; 8]>());
            std::ptr::write_unaligned(dst.add(i).cast::<[u8; 8]>(), word);
            escape_marks(u64::from_le_bytes(word)).trailing_zeros() as usize / 8
        };
        let mut i = 0;
        while i + 8 <= n {
            let kept = copy_word(i);
            if kept < 8 {
                return i + kept;
            }
            i += 8;
        }
        if i < n {
            // The last eight bytes, overlapping the ones copied already (which have no mark).
            return n - 8 + copy_word(n - 8);
        }
        n
    }
}
