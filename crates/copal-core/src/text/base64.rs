//! Standard base64 with padding (RFC 4648 section 4), for BYTES values in text documents. A few
//! lines here instead of a dependency: both directions are simple and not on a hot path.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn encode<O: super::TextOut + ?Sized>(data: &[u8], out: &mut O) {
    for chunk in data.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &b)| acc | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 0x3F) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
}

/// The bytes of `text`, or None if it is not canonical padded base64.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (index, quad) in bytes.chunks(4).enumerate() {
        let last = index == bytes.len() / 4 - 1;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            let v = ALPHABET.iter().position(|&a| a == c)? as u32;
            n = n << 6 | v;
        }
        n <<= 6 * pad as u32;
        let produced = 3 - pad;
        // Canonical form: the bits below the last full byte are zero.
        if n & ((1 << (8 * pad)) - 1) != 0 {
            return None;
        }
        out.extend_from_slice(&n.to_be_bytes()[1..1 + produced]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_rfc_vectors() {
        for (raw, text) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")] {
            let mut out = String::new();
            super::encode(raw.as_bytes(), &mut out);
            assert_eq!(out, text);
            assert_eq!(super::decode(text).unwrap(), raw.as_bytes());
        }
        for bad in ["Zg", "Zh==", "Z===", "Zg==Zg==", "Zm9*"] {
            assert_eq!(super::decode(bad), None, "{bad}");
        }
    }
}
