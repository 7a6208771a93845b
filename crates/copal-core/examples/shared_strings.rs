//! The experiment behind the shared-string writer's design (docs/ARCHITECTURE.md "The string
//! table"): the strings of seed 003's address book (`copal.bench.codec_models.make_people`),
//! written through `WrittenStrings` as the encoder writes them, without Python. Names, streets
//! and postcodes are fresh objects whose text repeats (written by field), e-mail addresses and
//! phone numbers are distinct, and phone kinds, cities and countries are string objects the
//! encoder finds by address (written as references to their first slot). Prints the best time
//! of writing and of `finish`, and the body's size. Run:
//! `cargo run --release -p copal-core --example shared_strings [records] [repetitions]`.

use std::time::{Duration, Instant};

use copal_core::format::{reference_is_shorter, ObjectField, StringForm, WrittenStrings};

const PERSON: u32 = 0;
const PHONE: u32 = 1;
const ADDRESS: u32 = 2;

/// A string of a record: the text, and for the strings found by address, its vocabulary number.
enum Text {
    Field(ObjectField, String),
    Shared(usize, String),
}

fn people(records: usize) -> Vec<Vec<Text>> {
    let mut state = 3u64;
    let mut below = |n: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let field = |descriptor, index| ObjectField { descriptor, index };
    (0..records)
        .map(|i| {
            let (first, last, city) = (below(20), below(18), below(10) as usize);
            let mut texts = vec![
                Text::Field(field(PERSON, 1), format!("first{first} last{last}")),
                Text::Field(field(PERSON, 2), format!("first{first}.last{last}.{i}@example.org")),
            ];
            for kind in 0..=below(3) as usize {
                texts.push(Text::Shared(kind, ["home", "work", "mobile"][kind].to_owned()));
                texts.push(Text::Field(field(PHONE, 1), format!("+{} {}", below(98) + 1, below(900_000_000) + 100_000_000)));
            }
            texts.push(Text::Field(field(ADDRESS, 0), format!("{} street{}", below(299) + 1, below(10))));
            texts.push(Text::Shared(3 + city, format!("city{city}")));
            texts.push(Text::Field(field(ADDRESS, 2), format!("{}", below(89_999) + 10_000)));
            texts.push(Text::Shared(13 + city, format!("country{city}")));
            texts
        })
        .collect()
}

/// Writes the strings of `records` as the encoder does (with a few bytes of other fields per
/// record), then shares them; the time of each part.
fn write(records: &[Vec<Text>]) -> (Duration, Duration, usize) {
    let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
    let mut shared: Vec<Option<u64>> = vec![None; 23];
    let started = Instant::now();
    for (i, record) in records.iter().enumerate() {
        body.extend_from_slice(&(i as u32).to_le_bytes());
        for text in record {
            match text {
                Text::Field(field, text) => {
                    strings.write_field(&mut body, StringForm::Typed, text.as_bytes(), *field);
                }
                Text::Shared(number, text) => match shared[*number] {
                    Some(slot) if reference_is_shorter(slot, text.len()) => strings.write_reference(&mut body, StringForm::Typed, slot),
                    _ => shared[*number] = Some(strings.write_new(&mut body, StringForm::Typed, text.as_bytes())),
                },
            }
        }
    }
    let written = started.elapsed();
    strings.finish(&mut body);
    (written, started.elapsed() - written, body.len())
}

fn main() {
    let mut args = std::env::args().skip(1).map(|arg| arg.parse::<usize>().expect("a number"));
    let (count, repetitions) = (args.next().unwrap_or(50_000), args.next().unwrap_or(15));
    let records = people(count);
    let (mut best_write, mut best_finish, mut size) = (Duration::MAX, Duration::MAX, 0);
    for _ in 0..repetitions {
        let (written, finished, len) = write(&records);
        (best_write, best_finish, size) = (best_write.min(written), best_finish.min(finished), len);
    }
    println!("{count} records: write {:.2} ms, finish {:.2} ms, body {size} bytes", best_write.as_secs_f64() * 1e3, best_finish.as_secs_f64() * 1e3);
}
