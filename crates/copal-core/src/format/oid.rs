//! Object ids (docs/FORMAT.md section "Object ids").
//!
//! An object id packs the object's class number into its top 16 bits and a per-class sequence
//! number into the low 48. Records are keyed by the big-endian id, so all objects of one class are
//! one contiguous key range: a class extent is a range scan and costs no extra entry per object.

pub type Oid = u64;
pub type ClassNo = u16;

const SEQ_BITS: u32 = 48;
pub const MAX_SEQ: u64 = (1 << SEQ_BITS) - 1;

/// The root mapping is the first object of class 1, created with the database.
pub const ROOT_CLASS: ClassNo = 1;
pub const ROOT_DESCRIPTOR: u32 = 1;
pub const ROOT_OID: Oid = make_oid(ROOT_CLASS, 0);
pub const ROOT_TYPE_NAME: &str = "copal.PersistentDict";

pub const fn make_oid(class: ClassNo, seq: u64) -> Oid {
    ((class as u64) << SEQ_BITS) | (seq & MAX_SEQ)
}

pub const fn oid_class(oid: Oid) -> ClassNo {
    (oid >> SEQ_BITS) as ClassNo
}

pub const fn oid_seq(oid: Oid) -> u64 {
    oid & MAX_SEQ
}

/// The half-open key range `[first, end)` holding the extent of `class`.
pub const fn class_extent(class: ClassNo) -> (Oid, Oid) {
    (make_oid(class, 0), make_oid(class, 0) + MAX_SEQ + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_and_seq_round_trip() {
        let oid = make_oid(513, 123_456_789);
        assert_eq!(oid_class(oid), 513);
        assert_eq!(oid_seq(oid), 123_456_789);
        let (lo, hi) = class_extent(513);
        assert!(lo <= oid && oid < hi);
        assert_eq!(hi, make_oid(514, 0));
    }
}
