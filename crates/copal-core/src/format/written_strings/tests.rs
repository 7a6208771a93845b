//! `WrittenStrings` against direct lookups: hashing, logging, deduplication and the rewrite.

use super::deduplication::RepeatFilter;
use super::*;
use std::collections::HashMap;

/// One step of writing a body: other bytes, a string written in full (with the hash the
/// table is given), or a reference to a provisional slot (the encoder's by-address level).
#[derive(Clone)]
enum Step {
    Other(&'static [u8]),
    New(StringForm, String, u64),
    Reference(StringForm, u64),
    /// That many references to a provisional slot, one after the other (`write_references`).
    References(StringForm, u64, usize),
    /// A string written as the value of a field of an object (`write_field`).
    Field(StringForm, String, ObjectField),
}

fn field(form: StringForm, text: &str, descriptor: u32, index: u32) -> Step {
    Step::Field(form, text.to_owned(), ObjectField { descriptor, index })
}

fn new(form: StringForm, text: &str) -> Step {
    Step::New(form, text.to_owned(), text_hash(text.as_bytes()))
}

/// The body `steps` make, deduplicated by `finish`.
fn deduplicated(steps: &[Step]) -> Vec<u8> {
    let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
    write_steps(&mut strings, &mut body, steps);
    strings.finish(&mut body);
    body
}

fn write_steps(strings: &mut WrittenStrings, body: &mut Vec<u8>, steps: &[Step]) {
    for step in steps {
        match step {
            Step::Other(bytes) => body.extend_from_slice(bytes),
            Step::New(form, text, hash) => {
                strings.write_new_hashed(body, *form, text.as_bytes(), *hash);
            }
            Step::Reference(form, slot) => strings.write_reference(body, *form, *slot),
            Step::References(form, slot, count) => strings.write_references(body, *form, *slot, *count),
            Step::Field(form, text, field) => {
                strings.write_field(body, *form, text.as_bytes(), *field);
            }
        }
    }
}

/// The body `steps` make when each string is looked up by content as it is written (the
/// encoder's previous design, whose bytes `finish` must reproduce): a string equal to an
/// earlier one is a reference to the first one's slot when shorter.
fn written_directly(steps: &[Step]) -> Vec<u8> {
    let (mut body, mut first_slots, mut provisional) = (Vec::new(), HashMap::new(), Vec::new());
    let mut slots = 0;
    let expanded = steps.iter().flat_map(|step| match step {
        Step::References(form, slot, count) => vec![Step::Reference(*form, *slot); *count],
        other => vec![other.clone()],
    });
    for step in &expanded.collect::<Vec<_>>() {
        let (form, text) = match step {
            Step::Other(bytes) => {
                body.extend_from_slice(bytes);
                continue;
            }
            Step::New(form, text, _) | Step::Field(form, text, _) => {
                provisional.push(text.clone());
                (*form, text.clone())
            }
            Step::Reference(form, slot) => (*form, provisional[*slot as usize].clone()),
            Step::References(..) => unreachable!("expanded above"),
        };
        match first_slots.get(&text) {
            Some(&slot) if reference_is_shorter(slot, text.len()) => form.write_reference(&mut body, slot),
            found => {
                form.write_new(&mut body, text.as_bytes());
                if found.is_none() {
                    first_slots.insert(text, slots);
                }
                slots += 1;
            }
        }
    }
    body
}

/// The strings of a body made of strings only, read as a reader does (slots taken in order).
fn read_strings(body: &[u8], forms: &[StringForm]) -> Vec<String> {
    let (mut at, mut slots, mut strings) = (0, Vec::<String>::new(), Vec::new());
    let varint = |at: &mut usize| {
        let (mut value, mut shift) = (0u64, 0);
        loop {
            let byte = body[*at];
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 {
                return value;
            }
        }
    };
    for form in forms {
        let head = match form {
            StringForm::Tagged => {
                at += 1;
                let head = varint(&mut at);
                if body[at - 1 - varint_len(head)] == tag::STR { StrHead::New(head) } else { StrHead::Slot(head) }
            }
            StringForm::Typed => StrHead::decode(varint(&mut at)),
        };
        let text = match head {
            StrHead::New(len) => {
                let text = String::from_utf8(body[at..at + len as usize].to_vec()).unwrap();
                at += len as usize;
                slots.push(text.clone());
                text
            }
            StrHead::Slot(slot) => slots[slot as usize].clone(),
        };
        strings.push(text);
    }
    assert_eq!(at, body.len(), "nothing follows the strings");
    strings
}

/// Checks that `finish` writes what direct lookups would, and returns that body.
fn same_as_direct(steps: &[Step]) -> Vec<u8> {
    let body = deduplicated(steps);
    assert_eq!(body, written_directly(steps));
    body
}

use StringForm::{Tagged, Typed};

/// The keys of `keys` that pass their filter, in their order.
fn possible_repeats(keys: &[u64]) -> Vec<u64> {
    RepeatFilter::of(keys).map_or_else(Vec::new, |filter| keys.iter().copied().filter(|&key| filter.passes(key)).collect())
}

#[test]
fn keys_whose_hash_bits_repeat_are_all_kept() {
    // Hash bits from a small range, so that many repeat; every one of those must be kept.
    let mut state = 7u64;
    let keys: Vec<u64> = (0..5000u64)
        .map(|index| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 52) << 32 | index
        })
        .collect();
    let repeated: Vec<u64> = {
        let mut counts = HashMap::new();
        for key in &keys {
            *counts.entry(key >> 32).or_insert(0) += 1;
        }
        let mut repeated: Vec<u64> = keys.iter().copied().filter(|key| counts[&(key >> 32)] > 1).collect();
        repeated.sort_unstable();
        repeated
    };
    let kept = possible_repeats(&keys);
    assert!(kept.windows(2).all(|pair| (pair[0] as u32) < (pair[1] as u32)), "in the order written");
    let mut kept = kept;
    kept.sort_unstable();
    let mut kept_repeated = kept.iter().copied().filter(|key| repeated.binary_search(key).is_ok());
    assert!(repeated.iter().all(|key| kept_repeated.next() == Some(*key)));
    // Distinct hash bits: nothing to compare.
    let distinct: Vec<u64> = (0..5000u64).map(|index| text_hash(&index.to_le_bytes()) & !u64::from(u32::MAX) | index).collect();
    assert!(possible_repeats(&distinct).len() < distinct.len() / 4);
}

#[test]
fn an_abandoned_log_still_numbers_slots_and_leaves_the_body_as_written() {
    let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
    strings.write_new(&mut body, Tagged, b"a");
    // As a body past 4 GiB does: the log stops, the slots go on.
    strings.abandoned = true;
    assert_eq!(strings.write_new(&mut body, Tagged, b"a"), 1);
    assert_eq!(strings.write_new(&mut body, Typed, b"b"), 2);
    strings.write_reference(&mut body, Tagged, 2);
    let written = body.clone();
    strings.finish(&mut body);
    assert_eq!(body, written);
    assert_eq!(read_strings(&body, &[Tagged, Tagged, Typed, Tagged]), ["a", "a", "b", "b"]);
}

/// The body of `before`, `abandoned` (written after a mark, then rewound and its bytes
/// removed) and `after`, finished, with the log that wrote it.
fn rewound(before: &[Step], abandoned: &[Step], after: &[Step]) -> (WrittenStrings, Vec<u8>) {
    let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
    write_steps(&mut strings, &mut body, before);
    let (mark, len) = (strings.mark(), body.len());
    write_steps(&mut strings, &mut body, abandoned);
    strings.rewind(mark);
    body.truncate(len);
    write_steps(&mut strings, &mut body, after);
    strings.finish(&mut body);
    (strings, body)
}

#[test]
fn strings_written_after_a_mark_and_rewound_leave_no_trace() {
    // Before the mark: "a", "b". After it, abandoned: a repeat of "a", a new "c", a
    // reference to "c" and other bytes. Then, written again from the mark: "c" (taking the
    // abandoned "c"'s slot), "b" and a reference to "c".
    let before = [new(Tagged, "a"), Step::Other(b"\x01"), new(Typed, "b")];
    let abandoned = [new(Typed, "a"), new(Tagged, "c"), Step::Reference(Typed, 3), Step::Other(b"\x02\x03")];
    let after = [new(Tagged, "c"), new(Typed, "b"), Step::Reference(Tagged, 2)];
    let (strings, body) = rewound(&before, &abandoned, &after);
    assert_eq!(strings.strings_in_full(), 4, "the abandoned strings' slots were taken again");
    let unbroken: Vec<Step> = before.iter().chain(&after).cloned().collect();
    assert_eq!(body, same_as_direct(&unbroken));
}

#[test]
fn a_log_kept_for_the_next_body_starts_empty() {
    let steps: Vec<Step> = (0..2000).map(|i| new(Tagged, &format!("s{}", i % 700))).collect();
    let first = deduplicated(&steps);
    // The log of the first body was kept for this thread's next one.
    let strings = WrittenStrings::default();
    assert!(strings.texts.capacity() >= 2000 && strings.texts.is_empty() && strings.references.is_empty() && strings.keys.is_empty());
    assert_eq!(strings.strings_in_full(), 0);
    drop(strings);
    assert_eq!(deduplicated(&steps), first);
    assert_eq!(first, written_directly(&steps));
}

#[test]
fn a_log_grown_past_the_size_kept_is_kept_at_the_size_it_used() {
    let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
    for i in 0..300_000 {
        strings.write_new(&mut body, Tagged, format!("s{i}").as_bytes());
    }
    (0..200_000).for_each(|_| strings.write_reference(&mut body, Typed, 7));
    let used = strings.log_bytes(false);
    assert!(strings.log_bytes(true) > MAX_SPARE_LOG_BYTES && used <= MAX_SPARE_LOG_BYTES);
    drop(strings);
    let next = WrittenStrings::default();
    assert!(next.texts.is_empty() && next.references.is_empty() && next.keys.is_empty());
    assert!((used..=MAX_SPARE_LOG_BYTES).contains(&next.log_bytes(true)), "{} bytes of room kept", next.log_bytes(true));
}

#[test]
fn numbers_keep_their_form_in_one_word() {
    for value in [0, 1, 300, (1 << 31) - 1] {
        for form in [Tagged, Typed] {
            let packed = WithForm::new(value, form).expect("below 2^31");
            assert_eq!((packed.value() as usize, packed.form()), (value, form));
        }
    }
    // Larger numbers leave the body as written (`abandoned`).
    assert!(WithForm::new(1 << 31, Tagged).is_none() && WithForm::new(usize::MAX, Typed).is_none());
}

#[test]
fn distinct_strings_are_left_as_written() {
    let steps: Vec<Step> = (0..300).map(|i| new(if i % 2 == 0 { Tagged } else { Typed }, &format!("s{i}"))).collect();
    let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
    for (slot, step) in steps.iter().enumerate() {
        let Step::New(form, text, _) = step else { unreachable!() };
        assert_eq!(strings.write_new(&mut body, *form, text.as_bytes()), slot as u64);
    }
    let written = body.clone();
    strings.finish(&mut body);
    assert_eq!(body, written);
}

#[test]
fn repeats_become_references_to_the_first_and_later_slots_move_down() {
    let steps = [new(Tagged, "red"), new(Typed, "green"), new(Typed, "red"), new(Tagged, "blue"), new(Tagged, "green"), new(Typed, "blue")];
    let body = same_as_direct(&steps);
    // red: slot 0, green: 1, red again: STRREF 0 (typed head 1), blue: slot 2 (3 provisionally).
    assert_eq!(body, b"\x07\x03red\x0agreen\x01\x07\x04blue\x1b\x01\x05");
    let forms: Vec<StringForm> = steps.iter().map(|step| match step { Step::New(form, ..) => *form, _ => unreachable!() }).collect();
    assert_eq!(read_strings(&body, &forms), ["red", "green", "red", "blue", "green", "blue"]);
}

#[test]
fn references_to_provisional_slots_are_renumbered() {
    // "b" repeats "a"'s text, so "c" moves from provisional slot 3 to slot 2; the references
    // to 1 ("b", a repeat) and 3 name the first occurrences' final slots.
    let steps = [new(Tagged, "a"), new(Tagged, "x"), new(Typed, "a"), new(Tagged, "c"), Step::Reference(Tagged, 2), Step::Reference(Typed, 3)];
    let body = same_as_direct(&steps);
    assert_eq!(read_strings(&body, &[Tagged, Tagged, Typed, Tagged, Tagged, Typed]), ["a", "x", "a", "c", "a", "c"]);
    assert_eq!(&body[body.len() - 3..], b"\x1b\x00\x05");
}

#[test]
fn runs_of_references_are_renumbered_as_single_references_are() {
    // "s7" again is a repeat, so "c" moves from provisional slot 128 to 127, and each run of
    // references to it is rewritten one byte shorter per reference (a two-byte varint becomes
    // one); the runs to slots before the repeat are left as written.
    let mut steps: Vec<Step> = (0..126).map(|i| new(Tagged, &format!("s{i}"))).collect();
    steps.extend([new(Tagged, "a"), new(Typed, "s7"), new(Tagged, "c"), Step::References(Tagged, 128, 5)]);
    steps.extend([Step::References(Typed, 0, 3), Step::References(Tagged, 126, 1), new(Typed, "c"), Step::References(Typed, 128, 4)]);
    let body = same_as_direct(&steps);
    let forms = [vec![Tagged; 127], vec![Typed], vec![Tagged; 6], vec![Typed; 3], vec![Tagged], vec![Typed; 5]].concat();
    let mut expected: Vec<String> = (0..126).map(|i| format!("s{i}")).collect();
    expected.extend(["a", "s7", "c", "c", "c", "c", "c", "c", "s0", "s0", "s0", "a", "c", "c", "c", "c", "c"].map(String::from));
    assert_eq!(read_strings(&body, &forms), expected);
}

#[test]
fn colliding_hashes_are_told_apart_by_their_bytes() {
    let texts = ["north", "south", "north", "east", "south", "north"];
    let steps: Vec<Step> = texts.iter().map(|text| Step::New(Tagged, text.to_string(), 42 << 32)).collect();
    let body = same_as_direct(&steps);
    assert_eq!(read_strings(&body, &[Tagged; 6]), texts);
    assert_eq!(body.len(), 7 + 7 + 6 + 3 * 2, "three distinct strings, three references");
    // Equal top bits with different low bits collide too (keys keep the top 32 bits).
    let steps = [Step::New(Typed, "up".into(), 42 << 32 | 7), Step::New(Typed, "down".into(), 42 << 32), Step::New(Typed, "up".into(), 42 << 32)];
    assert_eq!(read_strings(&same_as_direct(&steps), &[Typed; 3]), ["up", "down", "up"]);
}

#[test]
fn a_repeat_whose_reference_is_longer_is_written_again_and_takes_a_slot() {
    // "x" first at slot 200: a STRREF (tag and 2 bytes) is longer than the STR (3 bytes).
    let mut steps: Vec<Step> = (0..200).map(|i| new(Tagged, &format!("s{i}"))).collect();
    steps.extend([new(Tagged, "x"), new(Tagged, "x"), new(Tagged, "y"), new(Tagged, "y"), new(Tagged, "s5")]);
    let body = same_as_direct(&steps);
    // "x" again takes slot 201, so "y" is 202, and its repeat a STR too; "s5" a STRREF.
    assert!(body.ends_with(b"\x07\x01x\x07\x01x\x07\x01y\x07\x01y\x1b\x05"));
}

#[test]
fn many_repeats_of_one_string_and_repeats_at_the_end_of_the_body() {
    let mut steps = vec![Step::Other(b"\x01\x02"), new(Typed, "same")];
    for i in 0..1000 {
        steps.push(if i % 3 == 0 { Step::Other(b"\x03") } else { new(if i % 2 == 0 { Tagged } else { Typed }, "same") });
    }
    steps.push(new(Tagged, "last"));
    steps.push(new(Tagged, "last"));
    let body = same_as_direct(&steps);
    assert!(body.ends_with(b"\x07\x04last\x1b\x01"));
    assert!(body.len() < 1000 * 2 + 20);
}

#[test]
fn bodies_of_mixed_strings_match_direct_lookups() {
    // Texts from a vocabulary of 40 of several lengths and unique ones, past slots 127 and
    // 16383 (two- and three-byte varints), references to provisional slots of repeats and
    // of firsts, and other bytes between them.
    let (mut steps, mut provisional) = (Vec::new(), Vec::<String>::new());
    let mut state = 12345u64;
    for i in 0..40_000 {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let pick = (state >> 33) as usize;
        let form = if pick & 1 == 0 { Tagged } else { Typed };
        if pick % 5 == 1 {
            steps.push(Step::Other(b"\x00"));
        }
        if pick % 5 == 2 && !provisional.is_empty() {
            let slot = (pick / 5) % provisional.len();
            if reference_is_shorter(slot as u64, provisional[slot].len()) {
                steps.push(Step::Reference(form, slot as u64));
                continue;
            }
        }
        let vocabulary = pick / 8 % 40;
        let text = if pick.is_multiple_of(7) { format!("unique-{i}") } else { "v".repeat(vocabulary % 5 + 1) + &vocabulary.to_string() };
        provisional.push(text.clone());
        steps.push(new(form, &text));
    }
    assert!(provisional.len() > 16384);
    same_as_direct(&steps);
}

#[test]
fn repeats_in_a_field_are_references_as_written_and_the_body_is_the_same() {
    // Two classes whose fields repeat a vocabulary (the same texts in two fields, and in a
    // field of another class), beside a field of distinct values and tagged strings.
    let mut steps = Vec::new();
    for i in 0..3000 {
        let city = format!("city-{}", i % 37);
        steps.push(field(Typed, &city, 0, 1));
        steps.push(field(Typed, &format!("mail-{i}@example.org"), 0, 2));
        steps.push(field(Typed, &city, 1, 0));
        steps.push(Step::Other(b"\x05"));
        steps.push(new(Tagged, &format!("street-{}", i % 300)));
        steps.push(field(Tagged, &format!("city-{}", i % 41), 0, 3));
    }
    let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
    write_steps(&mut strings, &mut body, &steps);
    // Most repeats of the cities never reached the log of texts in full (15,000 strings
    // otherwise; those that did collided in a direct-mapped table).
    assert!(strings.texts.len() < 3000 + 3000 + 2000, "{} texts in full", strings.texts.len());
    strings.finish(&mut body);
    assert_eq!(body, written_directly(&steps));
}

#[test]
fn texts_that_look_alike_are_not_taken_for_each_other() {
    // Prefixes, one byte apart, equal bytes of another length, empty, non-ASCII: each in
    // one field, each written twice, and the first a prefix of what follows it.
    let texts = ["ab", "abc", "abd", "", "a", "ab\u{e9}", "ab\u{e8}", "abc", "ab"];
    let mut steps: Vec<Step> = texts.iter().map(|text| field(Typed, text, 0, 0)).collect();
    steps.extend(texts.iter().rev().map(|text| field(Tagged, text, 0, 0)));
    let body = same_as_direct(&steps);
    let forms: Vec<StringForm> = (0..texts.len()).map(|_| Typed).chain((0..texts.len()).map(|_| Tagged)).collect();
    let read: Vec<String> = texts.iter().chain(texts.iter().rev()).map(|text| text.to_string()).collect();
    assert_eq!(read_strings(&body, &forms), read);
}

#[test]
fn a_rewind_forgets_what_the_fields_remembered() {
    // "lost" is written in a field after the mark and rewound; "kept" before it. Then other
    // bytes and strings take the place and the slot of "lost", and the field writes "lost"
    // and "kept" again: "lost" must be new (its old place now holds "here"), "kept" may not
    // be found by the field any more (a new generation) but is shared by `finish`.
    let before = [field(Typed, "kept", 0, 0)];
    let abandoned = [field(Typed, "lost", 0, 0), field(Typed, "lost", 0, 0)];
    let after = [new(Typed, "here"), field(Typed, "lost", 0, 0), field(Typed, "kept", 0, 0), field(Typed, "lost", 0, 0)];
    let (_, body) = rewound(&before, &abandoned, &after);
    let unbroken: Vec<Step> = before.iter().chain(&after).cloned().collect();
    assert_eq!(body, same_as_direct(&unbroken));
    assert_eq!(read_strings(&body, &[Typed; 5]), ["kept", "here", "lost", "kept", "lost"]);
}

#[test]
fn generations_past_the_last_number_start_again_with_empty_tables() {
    let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
    strings.write_field(&mut body, Typed, b"old", ObjectField { descriptor: 0, index: 0 });
    let mark = strings.mark();
    strings.generation = u32::MAX - 1;
    strings.rewind(mark);
    strings.rewind(mark);
    assert_eq!(strings.generation, 1);
    // The entry of "old" (generation 1) was emptied: not taken for the new generation 1.
    strings.write_field(&mut body, Typed, b"old", ObjectField { descriptor: 0, index: 0 });
    assert_eq!(strings.texts.len(), 2);
    strings.finish(&mut body);
    assert_eq!(read_strings(&body, &[Typed; 2]), ["old", "old"]);
}

#[test]
fn many_distinct_strings_in_fields_retire_them_and_vocabularies_keep_theirs() {
    let (mut steps, mut state) = (Vec::new(), 7u64);
    for i in 0..40_000 {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        steps.push(field(Typed, &format!("distinct-{i}"), 2, 0));
        steps.push(field(Typed, &format!("vocabulary-{}", (state >> 33) % 3000), 2, 1));
        if i % 1000 == 0 {
            // A repeat of a distinct value, far from its first occurrence.
            steps.push(field(Typed, &format!("distinct-{}", i / 2), 2, 0));
        }
    }
    let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
    write_steps(&mut strings, &mut body, &steps);
    assert!(strings.fields[2][0].retired && !strings.fields[2][1].retired);
    strings.finish(&mut body);
    assert_eq!(body, written_directly(&steps));
}
