//! Short text appended to a writer's output by moves of fixed sizes.

use crate::text::TextOut;

/// Appends `piece`. Most pieces of a document are short (numbers, field names, short strings),
/// and for those a few moves of fixed sizes cost much less than the call to memcpy that
/// `push_str` makes for a length known only at run time (a sixth of the time of writing a list
/// of ints went to that call).
#[inline]
pub fn push_piece<O: TextOut + ?Sized>(out: &mut O, piece: &str) {
    // SAFETY: `piece` is UTF-8.
    unsafe { append(out, piece.as_bytes()) }
}

/// The bytes a `Piece` appends by one fixed-size move.
const PIECE_MOVE: usize = 32;

/// Text a writer appends again and again (a field name with its quotes and colon, the opening
/// of an object of one class), kept with room after it: up to `PIECE_MOVE` bytes it is
/// appended by one move of `PIECE_MOVE` bytes, of which the text takes its length, where
/// `push_piece` first dispatches on the length (a call and a few branches per piece: a
/// seventh of writing seed 001). Not for the JSON writer's dict-key cache (json_keys.rs): its
/// 256 slots, twice as large with a `Piece` each, made writing plain dicts 10-17% slower.
pub struct Piece {
    /// The text, then zeros up to `PIECE_MOVE` bytes (unused for a longer text).
    padded: [u8; PIECE_MOVE],
    text: String,
}

impl Piece {
    pub fn new(text: String) -> Self {
        let mut padded = [0; PIECE_MOVE];
        if let Some(start) = padded.get_mut(..text.len()) {
            start.copy_from_slice(text.as_bytes());
        }
        Piece { padded, text }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Appends the text to `out`.
    #[inline(always)]
    pub fn write<O: TextOut + ?Sized>(&self, out: &mut O) {
        let n = self.text.len();
        // Without the room for the whole move, the text alone: making room for more than the
        // text would grow an output sized for the document it is (see `LAST_LENGTH` in the
        // binding's json_writer/mod.rs) at its last piece, doubling it.
        if n > PIECE_MOVE || out.room() < PIECE_MOVE {
            out.push_str(&self.text);
            return;
        }
        // SAFETY: there is room for the `PIECE_MOVE` bytes stored; the first `n` are the text
        // (UTF-8), which `advance` takes; the zeros after it are not taken.
        unsafe {
            std::ptr::copy_nonoverlapping(self.padded.as_ptr(), out.end(), PIECE_MOVE);
            out.advance(n);
        }
    }
}

/// `push_piece` of bytes.
///
/// # Safety
/// `bytes` must be UTF-8 (the caller's bytes are ASCII, or a whole `str`).
#[inline]
unsafe fn append<O: TextOut + ?Sized>(out: &mut O, bytes: &[u8]) {
    let n = bytes.len();
    if n > 32 {
        // SAFETY: the caller guarantees UTF-8.
        out.push_str(unsafe { std::str::from_utf8_unchecked(bytes) });
        return;
    }
    out.reserve(n);
    // SAFETY: the bytes appended are UTF-8 (the caller's guarantee), so the text stays UTF-8;
    // `n` bytes of spare capacity were reserved, and each move below reads within `bytes` and
    // writes within those `n` bytes (the pairs of moves overlap when `n` is not their size).
    unsafe {
        let (src, dst) = (bytes.as_ptr(), out.end());
        match n {
            0 => {}
            1..=3 => {
                *dst = *src;
                *dst.add(n / 2) = *src.add(n / 2);
                *dst.add(n - 1) = *src.add(n - 1);
            }
            4..=7 => {
                std::ptr::copy_nonoverlapping(src, dst, 4);
                std::ptr::copy_nonoverlapping(src.add(n - 4), dst.add(n - 4), 4);
            }
            8..=16 => {
                std::ptr::copy_nonoverlapping(src, dst, 8);
                std::ptr::copy_nonoverlapping(src.add(n - 8), dst.add(n - 8), 8);
            }
            _ => {
                std::ptr::copy_nonoverlapping(src, dst, 16);
                std::ptr::copy_nonoverlapping(src.add(n - 16), dst.add(n - 16), 16);
            }
        }
        out.advance(n);
    }
}
