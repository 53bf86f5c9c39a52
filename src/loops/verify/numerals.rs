//! Numbers as people write them when they are not plain digits, for `guard:entities`
//! ([`super::entities`]): a count with a scale ("40k", "1.5M", "40 thousand", "forty-thousand",
//! "two hundred and five", "five dozen", "twenty-five") and a roman numeral after a word that
//! numbers things ("Phase II", "Tranche III", "Season IV").
//!
//! `guard:entities` requires every number of the query in the memory; before this module a
//! memory that said "the last of the 40k kits" or "the Phase II invoice" was refused for a
//! query about "40,000 kits" or "phase 2". Each reading here only adds values a memory states,
//! so it can only let more true signals through, never refuse one; a wrong value it reads
//! (say "8k" meaning a screen resolution) would only have to match the query's number exactly
//! to matter, and then meaning is left to the model as for any other number.

use super::number_words::CARDINALS;

/// Every value `text` states with a scale or as a roman numeral, in order (may repeat).
pub(super) fn values(text: &str) -> Vec<u64> {
    let mut out = suffixed(text);
    out.extend(worded(text));
    out.extend(romans(text));
    out
}

/// A run of digits as a value's text, leading zeros dropped ("0311" is "311", "000" is "0"):
/// how `guard:entities` and its `labels` compare numbers.
pub(super) fn value(digits: &str) -> String {
    let v = digits.trim_start_matches('0');
    if v.is_empty() {
        "0".to_string()
    } else {
        v.to_string()
    }
}

/// Digits with a scale after them: "40k", "1.5k", "2M", "40 thousand", "3 million".
/// Lower-case "m" is not read (minutes and metres), nor "k" glued to more letters ("4kg").
fn suffixed(text: &str) -> Vec<u64> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() || (i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_digit() || (matches!(b[i], b'.' | b',') && b.get(i + 1).is_some_and(u8::is_ascii_digit))) {
            i += 1;
        }
        let digits: String = text[start..i].chars().filter(|&c| c != ',').collect();
        let Ok(n) = digits.parse::<f64>() else { continue };
        let rest = &text[i..];
        let word_end = |w: &str| rest.get(w.len()..).is_none_or(|r| !r.starts_with(|c: char| c.is_alphanumeric()));
        let scale = if (rest.starts_with('k') || rest.starts_with('K')) && word_end("k") {
            1e3
        } else if rest.starts_with('M') && word_end("M") {
            1e6
        } else {
            let after = rest.trim_start().to_lowercase();
            let word = after.split(|c: char| !c.is_alphabetic()).next().unwrap_or("");
            match word {
                "thousand" => 1e3,
                "million" => 1e6,
                _ => continue,
            }
        };
        let v = n * scale;
        if v.fract() == 0.0 && v < 1e15 {
            out.push(v as u64);
        }
    }
    out
}

/// What a number word adds: a value ("forty") or a scale ("hundred", "thousand", "dozen").
enum Word {
    Value(u64),
    Scale(u64),
}

fn word(w: &str) -> Option<Word> {
    match w {
        "hundred" => return Some(Word::Scale(100)),
        "thousand" => return Some(Word::Scale(1_000)),
        "million" => return Some(Word::Scale(1_000_000)),
        "dozen" => return Some(Word::Scale(12)),
        _ => {}
    }
    CARDINALS.iter().find(|(c, _)| *c == w).map(|(_, v)| Word::Value(u64::from(*v)))
}

/// Numbers written in words with more than one word: "forty thousand", "forty-thousand",
/// "two hundred and five", "twenty-five", "five dozen". (Single words are read by
/// [`super::entities`] already.)
fn worded(text: &str) -> Vec<u64> {
    let lower = text.to_lowercase();
    let mut out = Vec::new();
    // total: the thousands and millions done; cur: the group being read; words: how many.
    let (mut total, mut cur, mut words) = (0u64, 0u64, 0usize);
    let mut flush = |total: &mut u64, cur: &mut u64, words: &mut usize| {
        if *words > 1 {
            out.push(total.saturating_add(*cur));
        }
        (*total, *cur, *words) = (0, 0, 0);
    };
    for w in lower.split(|c: char| !c.is_alphabetic()).filter(|w| !w.is_empty()) {
        if w == "and" && words > 0 {
            continue;
        }
        match word(w) {
            Some(Word::Scale(s)) if s >= 1_000 => {
                total = total.saturating_add(cur.max(1).saturating_mul(s));
                cur = 0;
                words += 1;
            }
            Some(Word::Scale(s)) => {
                cur = cur.max(1).saturating_mul(s);
                words += 1;
            }
            Some(Word::Value(v)) => {
                // "twenty" then "five", "hundred" then "five": one number; "two" then
                // "three": two numbers.
                let joins = words > 0 && ((cur % 10 == 0 && cur % 100 != 0 && v < 10) || (cur % 100 == 0 && v < 100) || cur == 0);
                if !joins {
                    flush(&mut total, &mut cur, &mut words);
                }
                cur = cur.saturating_add(v);
                words += 1;
            }
            None => flush(&mut total, &mut cur, &mut words),
        }
    }
    flush(&mut total, &mut cur, &mut words);
    out
}

/// Words after which a roman numeral is a number ("Phase II"), lower-case.
const NUMBERED: &[&str] = &[
    "phase",
    "part",
    "stage",
    "tier",
    "level",
    "season",
    "volume",
    "vol",
    "chapter",
    "round",
    "gen",
    "generation",
    "series",
    "book",
    "act",
    "class",
    "grade",
    "type",
    "title",
    "tranche",
    "schedule",
    "block",
    "wave",
    "step",
    "mark",
    "mk",
    "article",
    "annex",
    "appendix",
    "lot",
    "trial",
    "unit",
    "section",
    "episode",
    "version",
    "world",
    "war",
];

/// Roman numerals (I to XXXIX, upper case, in canonical form) after a word of [`NUMBERED`].
fn romans(text: &str) -> Vec<u64> {
    let words: Vec<&str> = text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    words.windows(2).filter(|p| NUMBERED.contains(&p[0].to_lowercase().as_str())).filter_map(|p| roman(p[1])).collect()
}

/// The value of a canonical roman numeral from 1 to 39 ("IIII" and "VX" are not).
pub(super) fn roman(w: &str) -> Option<u64> {
    const TENS: [&str; 4] = ["", "X", "XX", "XXX"];
    const ONES: [&str; 10] = ["", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"];
    (1..40u64).find(|&n| w.len() <= 6 && format!("{}{}", TENS[(n / 10) as usize], ONES[(n % 10) as usize]) == w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_with_a_scale_are_read() {
        assert_eq!(suffixed("the last of the 40k kits, 1.5k spares, 2M rows"), [40_000, 1_500, 2_000_000]);
        assert_eq!(suffixed("40 thousand kits; 3 million rows"), [40_000, 3_000_000]);
        assert!(suffixed("4kg of flour, 30m cable, 5km run, v2k").is_empty());
    }

    #[test]
    fn numbers_in_several_words_are_read() {
        assert_eq!(worded("forty-thousand-unit order"), [40_000]);
        assert_eq!(worded("forty thousand five hundred"), [40_500]);
        assert_eq!(worded("two hundred and five boxes"), [205]);
        assert_eq!(worded("twenty-five seats"), [25]);
        assert_eq!(worded("five dozen cases"), [60]);
        assert!(worded("two three").is_empty(), "two numbers, each a single word, are left to entities");
        assert!(worded("forty boxes and five crates").is_empty());
        assert_eq!(worded(&"hundred ".repeat(12)), [u64::MAX], "saturates, never overflows");
    }

    #[test]
    fn roman_numerals_count_only_after_a_numbering_word() {
        assert_eq!(romans("our Phase II fee invoice; Tranche XIV; Season IV"), [2, 14, 4]);
        assert!(romans("VI is my editor; the IV drip; Phase IIII").is_empty());
        assert_eq!(roman("XXXIX"), Some(39));
        assert_eq!(roman("VX"), None);
    }
}
