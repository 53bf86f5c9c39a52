//! Cloud regions by code and by place, for [`super::entities`].
//!
//! A gate query names a region by its code ("migrated to us-east-1"); the agent that did the
//! work often names the place the console shows ("now runs in US East (N. Virginia)"). The
//! numbers rule alone would ask the memory for the code's "1" and refuse the place. So a region
//! code of the query is compared as a whole: the memory states it when it writes the code
//! (with any separators: "US East 1", "useast1") or names the region's place, and another
//! region's code or place says nothing for it.
//!
//! The table holds the regions of the two providers whose codes carry digits (AWS, Google
//! Cloud); Azure's codes ("westeurope") have none for the numbers rule to trip on. A place
//! shared by two codes (Northern Virginia: AWS us-east-1 and Google's us-east4) answers both.

/// (code, places) — places lower-case, as the memory is matched after lower-casing and
/// replacing punctuation with spaces ("N. Virginia" → "n virginia").
const REGIONS: &[(&str, &[&str])] = &[
    // AWS
    ("us-east-1", &["n virginia", "northern virginia", "virginia"]),
    ("us-east-2", &["ohio"]),
    ("us-west-1", &["n california", "northern california"]),
    ("us-west-2", &["oregon"]),
    ("ca-central-1", &["canada central", "montreal"]),
    ("sa-east-1", &["sao paulo", "são paulo"]),
    ("eu-west-1", &["ireland", "dublin"]),
    ("eu-west-2", &["london"]),
    ("eu-west-3", &["paris"]),
    ("eu-central-1", &["frankfurt"]),
    ("eu-central-2", &["zurich"]),
    ("eu-north-1", &["stockholm"]),
    ("eu-south-1", &["milan"]),
    ("ap-northeast-1", &["tokyo"]),
    ("ap-northeast-2", &["seoul"]),
    ("ap-northeast-3", &["osaka"]),
    ("ap-southeast-1", &["singapore"]),
    ("ap-southeast-2", &["sydney"]),
    ("ap-south-1", &["mumbai"]),
    ("ap-east-1", &["hong kong"]),
    ("me-south-1", &["bahrain"]),
    ("af-south-1", &["cape town"]),
    // Google Cloud
    ("us-central1", &["iowa", "council bluffs"]),
    ("us-east1", &["south carolina"]),
    ("us-east4", &["n virginia", "northern virginia", "virginia", "ashburn"]),
    ("us-west1", &["oregon"]),
    ("europe-west1", &["belgium"]),
    ("europe-west2", &["london"]),
    ("europe-west3", &["frankfurt"]),
    ("europe-west4", &["netherlands"]),
    ("asia-northeast1", &["tokyo"]),
    ("asia-southeast1", &["singapore"]),
];

/// Lower-case words of `text`, punctuation replaced by single spaces, padded with a space on
/// each side so a whole-word search is a plain substring search.
fn words(text: &str) -> String {
    let mut out = String::from(" ");
    for c in text.to_lowercase().chars() {
        if c.is_alphanumeric() {
            out.push(c);
        } else if !out.ends_with(' ') {
            out.push(' ');
        }
    }
    if !out.ends_with(' ') {
        out.push(' ');
    }
    out
}

/// Whether a code that ends at `end` of `b` stands alone: the text ends, or a character other
/// than a letter or digit follows, or one letter does and then such a character ("us-east-1a"
/// is an availability zone of us-east-1, so it names the region; "us-east-12" is not it).
fn zone_or_end(b: &[u8], end: usize) -> bool {
    let alone = |i: usize| b.get(i).is_none_or(|c| !c.is_ascii_alphanumeric());
    alone(end) || b[end].is_ascii_lowercase() && alone(end + 1)
}

/// A region code the query names.
#[derive(Debug, Clone)]
pub(super) struct Region {
    /// The byte range of the code in the query.
    pub span: (usize, usize),
    pub code: &'static str,
    places: &'static [&'static str],
}

impl Region {
    /// Whether `memory` names this region, by its code in any spelling or by its place.
    pub fn named_by(&self, memory: &str) -> bool {
        let said = words(memory);
        let spaced = format!(" {}", words(self.code).trim());
        let glued = format!(" {}", self.code.replace('-', ""));
        let code = |w: &str| said.match_indices(w).any(|(at, _)| zone_or_end(said.as_bytes(), at + w.len()));
        code(&spaced) || code(&glued) || self.places.iter().any(|p| said.contains(&format!(" {p} ")))
    }

    /// The place a refusal shows beside the code ("us-east-1 (n virginia)").
    pub fn place(&self) -> &'static str {
        self.places[0]
    }
}

/// The region codes `query` names, each once, with its span.
pub(super) fn in_query(query: &str) -> Vec<Region> {
    let lower = query.to_ascii_lowercase();
    let b = lower.as_bytes();
    let mut out: Vec<Region> = Vec::new();
    for (code, places) in REGIONS {
        let mut from = 0;
        while let Some(at) = lower[from..].find(code) {
            let start = from + at;
            let end = start + code.len();
            let before = start == 0 || !b[start - 1].is_ascii_alphanumeric();
            let after = zone_or_end(b, end);
            if before && after && !out.iter().any(|r| r.code == *code) {
                out.push(Region { span: (start, end), code, places });
            }
            from = end;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_is_found_with_its_span_and_not_inside_a_longer_one() {
        let q = "OTA update server migrated to us-east-1";
        let r = in_query(q);
        assert_eq!(r.len(), 1);
        assert_eq!(&q[r[0].span.0..r[0].span.1], "us-east-1");
        assert!(in_query("moved to us-east-12").is_empty(), "not a region");
        assert_eq!(in_query("nodes up in us-east-1a").len(), 1, "an availability zone names its region");
        assert_eq!(in_query("replica in eu-west-2 and us-central1").len(), 2);
    }

    #[test]
    fn a_memory_names_a_region_by_code_in_any_spelling_or_by_place() {
        let r = &in_query("bucket replicated to us-east-1")[0];
        assert!(r.named_by("replication to US East 1 done"));
        assert!(r.named_by("useast1 replica caught up"));
        assert!(r.named_by("The bucket now replicates to AWS US East (N. Virginia)."));
        assert!(r.named_by("copied to us-east-1a"));
        assert!(!r.named_by("bucket replicated to us-east-2"));
        assert!(!r.named_by("bucket replicated to Ohio"));
        assert!(!r.named_by("plus east 1 more"), "words, not letters, are compared");
    }
}
