//! The guard's words, as data: every word list the rules consult, each documented once here,
//! and the multi-word markers. The rules ([`super::rules`], [`super::scope`],
//! [`super::identifier`]) hold no words of their own; they ask [`lookup`] (or the per-token
//! copy in [`super::tokens::Text`]) which lists a word is in.
//!
//! A word may sit in two lists only when the pair is in the tests' `SHARED` table with its
//! reason (a test checks), and in at most one marker list (a marker has one class).

use std::sync::LazyLock;

use foldhash::HashMap;

use super::super::number_words::CARDINALS;
use super::class::Class::{self, *};

/// A set of the flag lists below (a word's memberships).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Lists(u64);

impl Lists {
    pub(super) const PROBLEM_NOUN: Lists = Lists(1 << 0);
    pub(super) const FILLER: Lists = Lists(1 << 1);
    pub(super) const BE: Lists = Lists(1 << 2);
    pub(super) const RESOLVER: Lists = Lists(1 << 3);
    pub(super) const AUX: Lists = Lists(1 << 4);
    pub(super) const POSITIVE_STATE: Lists = Lists(1 << 5);
    pub(super) const POSITIVE_ING: Lists = Lists(1 << 6);
    pub(super) const SUCCESS: Lists = Lists(1 << 7);
    pub(super) const DONE: Lists = Lists(1 << 8);
    pub(super) const STRONG_NEGATOR: Lists = Lists(1 << 9);
    pub(super) const WEAK_NEGATOR: Lists = Lists(1 << 10);
    pub(super) const NUMBER_LABEL: Lists = Lists(1 << 11);
    pub(super) const CLAUSE_BREAK: Lists = Lists(1 << 12);
    pub(super) const CONDITIONAL: Lists = Lists(1 << 13);
    pub(super) const WEEKDAY: Lists = Lists(1 << 14);
    pub(super) const EXIT_VERB: Lists = Lists(1 << 15);
    pub(super) const EXIT_CODE: Lists = Lists(1 << 16);
    pub(super) const HTTP_STATUS: Lists = Lists(1 << 17);
    pub(super) const STILL_UNFINISHED: Lists = Lists(1 << 18);
    pub(super) const STATE_VERB: Lists = Lists(1 << 19);
    pub(super) const FRACTION_DETERMINER: Lists = Lists(1 << 20);
    pub(super) const FEW: Lists = Lists(1 << 21);
    pub(super) const REMAINING: Lists = Lists(1 << 22);
    pub(super) const ONLY_PART: Lists = Lists(1 << 23);
    pub(super) const NOT_PLURAL_THINGS: Lists = Lists(1 << 24);
    pub(super) const PROGRESSIVE_BE: Lists = Lists(1 << 25);
    pub(super) const MAY_VERB: Lists = Lists(1 << 26);
    pub(super) const HISTORY: Lists = Lists(1 << 27);
    pub(super) const GONE: Lists = Lists(1 << 28);
    pub(super) const NOTHING_LEFT: Lists = Lists(1 << 29);
    pub(super) const ZERO: Lists = Lists(1 << 30);

    pub(super) fn contains(self, other: Lists) -> bool {
        self.0 & other.0 != 0
    }
}

/// What membership of a list means.
pub(super) enum Role {
    /// The word states an outcome of `class`; `problem`: a negator, a zero or a fix cancels it
    /// ("not failed" is good news; "not started" is not, so `started` is no problem).
    Marker { class: Class, problem: bool },
    /// A plain set, consulted by the rules that name it.
    Flag(Lists),
}

/// A documented word list (its name and doc are read by the tests and by whoever reads this
/// file; the rules know a list by its [`Role`]).
pub(super) struct List {
    #[cfg_attr(not(test), allow(dead_code))]
    pub name: &'static str,
    #[cfg_attr(not(test), allow(dead_code))]
    pub doc: &'static str,
    pub role: Role,
    pub words: &'static [&'static str],
}

const fn marker(name: &'static str, doc: &'static str, class: Class, problem: bool, words: &'static [&'static str]) -> List {
    List { name, doc, role: Role::Marker { class, problem }, words }
}

const fn flag(name: &'static str, doc: &'static str, lists: Lists, words: &'static [&'static str]) -> List {
    List { name, doc, role: Role::Flag(lists), words }
}

/// Every word list, markers first.
pub(super) const LISTS: &[List] = &[
    // --- Markers: one word that states an outcome (the `lexicon` rule).
    marker("negation_problem", "Negation by absence: a negator cancels it (\"nothing missing\").", Negation, true, &[
        "missing", "absent", "unresolved", "unanswered",
    ]),
    marker("negation_state", "Negation by a prefix or lack: not cancellable (\"not unmerged\" is rare and unclear).", Negation, false, &[
        "lacks", "lacking", "unapproved", "unmerged", "unreviewed", "unsigned", "unverified", "untested", "unpublished", "unreleased",
        "undeployed", "unfixed",
    ]),
    marker("failure", "Failure, including positively worded outcomes (\"finished with 4 errors\").", Failure, true, &[
        "fail", "fails", "failed", "failing", "failure", "failures", "unsuccessful", "unsuccessfully", "error", "errors", "errored",
        "erroring", "crash", "crashed", "crashes", "crashing", "abort", "aborted", "aborts", "aborting", "broken", "broke", "red",
        "timeout", "timeouts", "diverged", "diverge", "diverges", "diverging", "divergence", "nan", "exception", "exceptions", "panic",
        "panicked", "panics", "panicking", "segfault", "segfaulted", "oom", "regression", "regressions", "regressed", "flaky", "flaked",
        "outage", "outages", "corrupted", "corrupt", "corruption", "unhealthy", "degraded", "unreachable", "unavailable", "non-zero",
        "nonzero", "mismatch", "mismatched", "mismatches", "wrong", "incorrect", "invalid", "missed", "lost", "killed", "hung", "problem",
        "problems", "bounced", "fatal", "vulnerable", "leaked", "leaking", "reproduces", "reproducible", "recurring", "recurs",
        "recurred",
    ]),
    marker("refusal", "Refusal by a person or a process.", Refusal, true, &[
        "rejected", "reject", "rejects", "rejecting", "rejection", "rejections", "declined", "decline", "declines", "declining", "denied",
        "deny", "denies", "denial", "refused", "refuse", "refuses", "refusal", "vetoed", "veto", "disapproved", "cancelled", "canceled",
        "cancel", "cancels", "cancelling", "canceling", "cancellation", "wontfix", "nacked",
    ]),
    marker("partial", "Part of the work: not cancellable (\"not mostly\" still says part).", Partial, false, &[
        "partially", "partly", "partial", "half", "halfway", "mostly", "incomplete", "unfinished", "almost", "nearly", "except",
        "excluding", "subset",
    ]),
    marker("partial_problem", "Part of the work left out: \"0 skipped\" and \"nothing skipped\" cancel it.", Partial, true, &[
        "skipped", "skipping",
    ]),
    marker("pending_problem", "Waiting on something: \"no blockers\", \"nothing outstanding\" cancel it.", Pending, true, &[
        "pending", "waiting", "awaiting", "queued", "blocked", "blocker", "blockers", "blocking", "stalled", "stuck", "todo", "todos",
        "outstanding", "needs", "need", "needed", "requires", "delayed", "postponed", "deferred", "tbd",
    ]),
    marker("pending_state", "Started but not finished: \"not started\" is no better, so not cancellable.", Pending, false, &[
        "ongoing", "underway", "in-progress", "inprogress", "paused", "draft", "wip", "started", "starting", "begun", "began", "initiated",
        "retrying",
    ]),
    marker("planned", "Future work.", Planned, false, &[
        "will", "shall", "gonna", "scheduled", "upcoming", "tomorrow", "tonight", "soon", "eta", "slated",
    ]),
    marker("reverted", "Done, then undone.", Reverted, true, &[
        "reverted", "revert", "reverts", "reverting", "rollback", "rollbacks", "undone", "undid", "reopened", "reopen", "reopens",
        "reopening", "retracted", "withdrawn", "withdrew", "superseded", "refunded", "chargeback", "downgraded", "yanked",
    ]),
    marker("unpaid", "Money still owed.", Unpaid, true, &[
        "unpaid", "overdue", "owed", "owing", "owes", "arrears", "delinquent", "unsettled", "reminder", "dunning",
    ]),
    marker("uncertain", "Hedges and modals that do not state a fact.", Uncertain, false, &[
        "maybe", "might", "possibly", "probably", "likely", "unlikely", "perhaps", "unclear", "uncertain", "unsure", "unknown",
        "unconfirmed", "tentative", "tentatively", "hopefully", "supposedly", "apparently", "seems", "seemingly", "should", "would",
        "could",
    ]),
    // --- Flags.
    flag("problem_noun", "Problems only to cancel a negator (\"no issues\", \"no bugs\"); alone they are topic (\"issue 42\", \"bug fix\").",
        Lists::PROBLEM_NOUN, &[
        "issue", "issues", "bug", "bugs", "warning", "warnings", "complaint", "complaints", "complained", "objection", "objections",
        "objected", "concern", "concerns", "incident", "incidents", "downtime", "conflict", "conflicts", "flake", "flakes", "hiccup",
        "hiccups", "glitch", "glitches", "leak", "leaks", "left", "remaining", "vulnerability", "vulnerabilities", "alert", "alerts",
        "defect", "defects", "loss", "delay", "delays", "violation", "violations", "findings", "surprises", "gaps", "discrepancies",
        "differences", "diffs", "retries", "complications", "risks", "breakage", "breakages", "breaking", "required", "dropped",
        "reboots", "restarts", "rework",
    ]),
    flag("filler", "Words a negation reaches across to its problem: \"not a single failure\", \"didn't see any errors\".",
        Lists::FILLER, &[
        "a", "an", "the", "any", "all", "single", "more", "further", "new", "known", "real", "major", "minor", "serious", "critical",
        "other", "reported", "open", "remaining", "significant", "obvious", "visible", "additional", "actual", "test", "tests", "unit",
        "build", "ci", "lint", "type", "compile", "compiler", "runtime", "merge", "security", "one", "longer", "sign", "signs", "of",
        "see", "saw", "seen", "find", "found", "hit", "get", "got", "encounter", "encountered", "observe", "observed", "notice",
        "noticed", "report", "detect", "detected", "have", "has", "had", "show", "showed", "shown", "produce", "produced", "raise",
        "raised", "throw", "threw", "thrown", "cause", "caused", "introduce", "introduced", "spot", "spotted", "experience",
        "experienced", "there", "are", "were", "been", "be", "is", "was", "data", "big", "such", "similar", "high", "action",
        "actions", "functional", "user", "customer", "items", "item", "tasks", "task", "work",
    ]),
    flag("be", "Copulas and adverbs between a problem and its fix: \"the crash was finally fixed\".", Lists::BE, &[
        "is", "was", "were", "are", "been", "be", "has", "have", "had", "got", "gets", "now", "all", "finally", "already", "since", "just",
    ]),
    flag("resolver", "Words that say a problem is over: \"fixed the failing test\", \"errors resolved\".", Lists::RESOLVER, &[
        "fixed", "fix", "fixes", "resolved", "resolve", "resolves", "addressed", "cleared", "eliminated", "removed", "patched", "solved",
        "mitigated", "squashed", "repaired", "recovered", "closed",
    ]),
    flag("aux", "Auxiliaries a negation quote starts at: \"could not upload\".", Lists::AUX, &[
        "could", "can", "did", "does", "do", "is", "was", "are", "were", "has", "have", "had", "will", "would", "should", "may", "might",
        "must", "be", "been", "am",
    ]),
    flag("positive_state", "States that \"still\" keeps good: \"tests still pass\".", Lists::POSITIVE_STATE, &[
        "pass", "passes", "passing", "passed", "works", "working", "green", "good", "fine", "ok", "okay", "valid", "healthy", "up",
        "stable", "holds", "holding", "functioning", "intact", "correct", "succeeds", "succeeding", "fast", "live",
    ]),
    flag("positive_ing", "\"-ing\" words after \"is\" or \"still\" that describe a state, not unfinished work (with the positive states and any \"-thing\").",
        Lists::POSITIVE_ING, &[
        "running", "serving", "looking", "performing", "shipping", "going", "interesting", "amazing", "exciting", "promising",
        "encouraging", "surprising", "confusing", "annoying", "boring", "pleasing", "satisfying", "willing", "trending", "thriving",
        "humming", "responding", "listening", "accepting", "during",
    ]),
    flag("success", "Outcomes that make a later problem history: \"passed after 2 failed attempts\".", Lists::SUCCESS, &[
        "succeeded", "passed", "passing", "passes", "green", "completed", "finished", "done", "converged", "recovered", "worked", "works",
        "ok", "deployed", "merged", "approved", "shipped", "fixed", "resolved",
    ]),
    flag("done", "Words near a percentage that make it progress: \"40% done\", \"rollout at 25%\".", Lists::DONE, &[
        "done", "complete", "completed", "finished", "through", "migrated", "uploaded", "deployed", "processed", "rolled", "rollout",
        "progress", "ready", "synced", "indexed", "loaded", "converted", "imported", "exported", "copied", "enabled", "translated",
        "reviewed", "tested", "downloaded", "installed", "upgraded",
    ]),
    flag("strong_negator", "Negators that state a negation alone (with any word ending in \"n't\" and \"no\", see `scope::negator`).",
        Lists::STRONG_NEGATOR, &[
        "not", "never", "cannot", "unable", "nobody", "dont", "doesnt", "didnt", "isnt", "wasnt", "arent", "werent", "hasnt", "havent",
        "hadnt", "cant", "couldnt", "wouldnt", "shouldnt", "wont", "aint", "mustnt", "neednt",
    ]),
    flag("weak_negator", "Negators that only cancel problems; alone they state nothing (\"merged without a squash\", \"nothing to add\").",
        Lists::WEAK_NEGATOR, &["without", "nothing", "none", "neither", "nor", "nowhere"]),
    flag("number_label", "Words between a kind and its number: \"pull request number 42\", \"invoice no. 1031\".", Lists::NUMBER_LABEL, &[
        "number", "no", "nr", "num", "id",
    ]),
    flag("clause_break", "Words that start a new statement inside a sentence, about possibly different things.", Lists::CLAUSE_BREAK, &[
        "but", "while", "whereas", "however", "although", "though",
    ]),
    flag("conditional", "Words after which, up to the next clause mark, nothing is stated (\"if anything breaks\"; also \"in case\").",
        Lists::CONDITIONAL, &["if", "unless", "whether"]),
    flag("weekday", "Days, for dates ahead: \"next Monday\", \"by Friday\".", Lists::WEEKDAY, &[
        "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
    ]),
    flag("exit_verb", "Process endings before a code: \"exited with 137\".", Lists::EXIT_VERB, &["exit", "exited", "return", "returned"]),
    flag("exit_code", "What follows an exit verb before the number.", Lists::EXIT_CODE, &["code", "status", "with"]),
    flag("http_status", "Words right before an HTTP status: \"HTTP 503\", \"returned 500\".", Lists::HTTP_STATUS, &[
        "http", "status", "returned", "returns", "returning",
    ]),
    flag("still_unfinished", "Words after \"still\" that say the work goes on: \"still open\", \"still in review\" (a marker after \"still\" speaks for itself, so none is listed).", Lists::STILL_UNFINISHED, &[
        "open", "in", "on", "under", "at", "there", "running",
    ]),
    flag("state_verb", "Third-person verbs after \"still\" that describe a state: \"still looks good\".", Lists::STATE_VERB, &[
        "looks", "stands", "holds",
    ]),
    flag("fraction_determiner", "Words between \"of\" and a total: \"3 of the 5\".", Lists::FRACTION_DETERMINER, &["the", "all", "its", "our"]),
    flag("few", "Vague counts before \"left\": \"a few left\".", Lists::FEW, &["some", "few", "several", "couple", "handful"]),
    flag("remaining", "Words that say part is still to do after a count: \"2 left\".", Lists::REMAINING, &[
        "left", "remaining", "remain", "outstanding",
    ]),
    flag("only_part", "Words after \"only\" that make it a part: \"only some\", \"only the first\".", Lists::ONLY_PART, &[
        "some", "half", "part", "partially", "partly", "few", "several", "the",
    ]),
    flag("not_plural_things", "Plurals after \"some\" that are no subset of the work: \"some times\".", Lists::NOT_PLURAL_THINGS, &[
        "times", "ways",
    ]),
    flag("progressive_be", "Words before an \"-ing\" verb that make it work in progress: \"is deploying\".", Lists::PROGRESSIVE_BE, &[
        "is", "are", "am", "was", "were", "currently",
    ]),
    flag("may_verb", "Verbs after \"May\" that make it the modal, not the month: \"May be merged\".", Lists::MAY_VERB, &[
        "be", "have", "not", "need", "take", "fail", "require",
    ]),
    flag("history", "Words after a success that make what follows history: \"passed after 2 failed attempts\".", Lists::HISTORY, &[
        "after", "despite",
    ]),
    flag("gone", "Words after a copula that end a problem: \"errors are gone\".", Lists::GONE, &["gone", "over"]),
    flag("nothing_left", "Words right after a problem that count it as none: \"errors: none\", \"leak-free\" (and a zero).",
        Lists::NOTHING_LEFT, &["none", "free"]),
    flag("zero", "Words that count as zero before a problem: \"nil errors\" (with the number zero).", Lists::ZERO, &["nil"]),
];

/// What a number names, from the word before it ("PR 42", "build 7"). Kinds only contradict
/// each other when both are known: "issue 42" is not "PR 42", "#42" is either. ("request"
/// after "pull" or "merge" is a PR too: [`super::numbers::kind_word`].)
pub(super) const KIND_WORDS: &[(&str, &[&str])] = &[
    ("pr", &["pr", "prs", "mr", "pull", "pulls"]),
    ("issue", &["issue", "issues", "bug", "ticket"]),
    ("version", &["v", "version", "release", "rel", "tag"]),
    ("build", &["build", "builds"]),
    ("invoice", &["invoice", "inv"]),
    ("order", &["order", "po"]),
    ("job", &["job"]),
    ("run", &["run"]),
    ("pipeline", &["pipeline"]),
    ("epoch", &["epoch"]),
    ("step", &["step"]),
    ("sprint", &["sprint"]),
    ("phase", &["phase"]),
    ("stage", &["stage"]),
    ("batch", &["batch"]),
    ("shard", &["shard"]),
    ("task", &["task"]),
    ("story", &["story"]),
    ("incident", &["incident"]),
    ("commit", &["commit"]),
    ("milestone", &["milestone"]),
    ("account", &["account"]),
    ("customer", &["customer"]),
    ("case", &["case"]),
    ("payment", &["payment"]),
];

/// Negators that negate nothing: "not only", "no matter" (and "or not": `scope::idiom`).
pub(super) const IDIOMS: &[(&str, &[&str])] = &[("not", &["only", "just", "merely", "necessarily"]), ("no", &["matter", "doubt"])];

/// One position of a multi-word marker.
pub(super) enum Slot {
    /// One of these words.
    W(&'static [&'static str]),
    /// A word of this list.
    L(Lists),
    /// Any token.
    Any,
}

/// A multi-word marker: tokens matching `slots`, in order, state `class`.
pub(super) struct Phrase {
    pub slots: &'static [Slot],
    pub class: Class,
    pub problem: bool,
}

const fn phrase(slots: &'static [Slot], class: Class, problem: bool) -> Phrase {
    Phrase { slots, class, problem }
}

use Slot::{Any, L, W};

/// The multi-word markers, tried in this order at a word (the first that matches wins). Each
/// starts with a `W` slot.
pub(super) const PHRASES: &[Phrase] = &[
    phrase(&[W(&["timed", "times", "time"]), W(&["out"])], Failure, true),
    phrase(&[W(&["went", "goes", "is", "was", "are", "were"]), W(&["down"])], Failure, true),
    phrase(&[W(&["ran", "run", "runs"]), W(&["into"])], Failure, true),
    phrase(&[W(&["had", "has", "have", "hit", "with"]), W(&["issues"])], Failure, true),
    phrase(&[W(&["rolled", "roll", "rolling", "rolls"]), W(&["back"])], Reverted, true),
    phrase(&[W(&["backed", "backing"]), W(&["out"])], Reverted, true),
    phrase(&[W(&["taken", "took"]), W(&["down"])], Reverted, true),
    phrase(&[W(&["changes"]), W(&["requested", "required", "needed"])], Refusal, true),
    phrase(&[W(&["requested", "request", "requests", "requesting"]), W(&["changes"])], Refusal, true),
    phrase(&[W(&["turned"]), W(&["down"])], Refusal, true),
    phrase(&[W(&["called"]), W(&["off"])], Refusal, true),
    phrase(&[W(&["on"]), W(&["hold"])], Pending, true),
    phrase(&[W(&["in"]), W(&["progress", "review", "queue"])], Pending, false),
    phrase(&[W(&["under"]), W(&["review", "way"])], Pending, false),
    phrase(&[W(&["for"]), W(&["review"])], Pending, false),
    phrase(&[W(&["yet"]), W(&["to"])], Pending, false),
    phrase(&[W(&["kicked"]), W(&["off"])], Pending, false),
    // "in the queue", "in the merge queue".
    phrase(&[W(&["in"]), W(&["the"]), W(&["queue"])], Pending, false),
    phrase(&[W(&["in"]), W(&["the"]), Any, W(&["queue"])], Pending, false),
    phrase(&[W(&["expected"]), W(&["by", "on", "at"])], Planned, false),
    phrase(&[W(&["to"]), W(&["do"])], Pending, true),
    phrase(&[W(&["half", "some", "most", "majority", "several", "few", "none"]), W(&["of"])], Partial, false),
    phrase(&[W(&["half"]), W(&["the"])], Partial, false),
    phrase(&[W(&["all", "everything", "everyone"]), W(&["but"])], Partial, false),
    phrase(
        &[
            W(&[
                "going",
                "about",
                "plan",
                "plans",
                "planning",
                "planned",
                "intend",
                "intends",
                "intending",
                "aim",
                "aims",
                "aiming",
                "hope",
                "hopes",
                "hoping",
                "want",
                "wants",
                "trying",
                "try",
                "expected",
                "expect",
                "expects",
            ]),
            W(&["to"]),
        ],
        Planned,
        false,
    ),
    phrase(&[W(&["planned"]), W(&["for"])], Planned, false),
    phrase(&[W(&["next"]), L(Lists::WEEKDAY)], Planned, false),
    phrase(&[W(&["next"]), W(&["week", "month", "sprint", "release", "quarter", "year"])], Planned, false),
    phrase(&[W(&["later"]), W(&["today", "tonight", "this"])], Planned, false),
    phrase(&[W(&["by"]), L(Lists::WEEKDAY)], Planned, false),
    phrase(&[W(&["by"]), W(&["tomorrow", "tonight", "eod", "eow", "noon"])], Planned, false),
    phrase(&[W(&["past"]), W(&["due"])], Unpaid, true),
];

// `Entry::phrases` has a bit per phrase.
const _: () = assert!(PHRASES.len() <= 64, "Entry::phrases holds 64 phrases");

/// What the lexicon knows of one word.
#[derive(Debug, Default)]
pub(super) struct Entry {
    /// The flag lists it is in.
    pub lists: Lists,
    /// Its marker list's class and problem bit.
    pub marker: Option<(Class, bool)>,
    /// Its value as a number word.
    pub num: Option<u64>,
    /// The kind of number it names (`KIND_WORDS`).
    pub kind: Option<&'static str>,
    /// The `PHRASES` it starts (bit i: `PHRASES[i]`).
    pub phrases: u64,
}

static NOTHING: Entry = Entry { lists: Lists(0), marker: None, num: None, kind: None, phrases: 0 };

static LEXICON: LazyLock<HashMap<&'static str, Entry>> = LazyLock::new(|| {
    let mut m: HashMap<&'static str, Entry> = HashMap::default();
    for list in LISTS {
        for &w in list.words {
            let e = m.entry(w).or_default();
            match list.role {
                Role::Marker { class, problem } => {
                    debug_assert!(e.marker.is_none(), "{w} is in two marker lists");
                    e.marker.get_or_insert((class, problem));
                }
                Role::Flag(l) => e.lists = Lists(e.lists.0 | l.0),
            }
        }
    }
    // Numbers written as words (the table `guard:entities` reads too). "one" in a query is not
    // required: `identifier::required` skips it (usually a pronoun).
    for &(w, n) in CARDINALS {
        m.entry(w).or_default().num = Some(u64::from(n));
    }
    for &(kind, words) in KIND_WORDS {
        for &w in words {
            m.entry(w).or_default().kind = Some(kind);
        }
    }
    for (i, p) in PHRASES.iter().enumerate() {
        let Slot::W(first) = p.slots[0] else { panic!("phrase {i} must start with a W slot") };
        for &w in first {
            m.entry(w).or_default().phrases |= 1 << i;
        }
    }
    m
});

/// What the lexicon knows of `w` (lowercased).
pub(super) fn lookup(w: &str) -> &'static Entry {
    LEXICON.get(w).unwrap_or(&NOTHING)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs of lists that share words on purpose, with the reason. A test fails on any other
    /// shared word.
    const SHARED: &[(&str, &str, &str)] = &[
        ("filler", "be", "copulas sit between a negator and its problem and between a problem and its fix"),
        ("filler", "aux", "\"has\"/\"is\" are crossed after a negator and start the quote before one"),
        ("be", "aux", "copulas are auxiliaries"),
        ("be", "progressive_be", "a copula before an \"-ing\" verb makes the progressive"),
        ("aux", "progressive_be", "the same copulas, read by different rules"),
        ("filler", "progressive_be", "the same copulas, read by different rules"),
        ("be", "fraction_determiner", "\"all\": an adverb before a fix (\"all fixed\") and before a total (\"3 of all 5\")"),
        ("uncertain", "aux", "\"could\"/\"would\": a hedge alone, the start of the quote before a negator (\"could not upload\")"),
        ("planned", "aux", "\"will\": future alone, the start of the quote before a negator (\"will not merge\")"),
        ("failure", "may_verb", "\"may fail\": the modal before it, a failure alone"),
        ("pending_problem", "may_verb", "\"may need\": the modal before it, pending work alone"),
        ("pending_problem", "remaining", "\"2 outstanding\" is a part left (tried first), \"outstanding\" alone is pending"),
        ("partial", "only_part", "\"only half\" is quoted as one part (tried first), \"half\" alone is partial"),
        ("filler", "problem_noun", "\"remaining\" is crossed before a problem and is one after a negator (\"nothing remaining\")"),
        ("problem_noun", "remaining", "\"left\"/\"remaining\": a count of what is left, and a problem a zero cancels"),
        ("filler", "remaining", "\"remaining\" is crossed before a problem (\"no remaining errors\")"),
        ("filler", "fraction_determiner", "articles: crossed by negations, and between \"of\" and a total"),
        ("filler", "only_part", "\"the\" after \"only\" and as a filler"),
        ("fraction_determiner", "only_part", "\"the\" after \"only\" and between \"of\" and a total"),
        ("filler", "still_unfinished", "\"open\" is crossed before a problem and unfinished after \"still\""),
        ("resolver", "success", "a fix is also a success before \"after\""),
        ("positive_state", "success", "passing states are successes"),
        ("positive_state", "state_verb", "\"holds\" keeps a state good and is a state verb"),
        ("positive_ing", "still_unfinished", "\"running\": a state after \"is\", unfinished after \"still\""),
        ("done", "success", "completion words are successes"),
        ("exit_verb", "http_status", "\"returned\" precedes both an exit code and an HTTP status"),
        ("exit_code", "http_status", "\"status\" precedes both"),
        ("few", "only_part", "vague counts after \"only\" and before \"left\""),
        ("aux", "may_verb", "\"be\"/\"have\" after the modal May"),
        ("be", "may_verb", "\"be\"/\"have\" after the modal May"),
        ("filler", "may_verb", "\"be\"/\"have\" after the modal May"),
        ("strong_negator", "may_verb", "\"may not\": the modal before a negator"),
        ("weak_negator", "nothing_left", "\"none\" after a problem counts it as zero; before one it cancels it"),
    ];

    /// A word in two lists must have a written reason ([`SHARED`]); a word in two marker lists
    /// is never allowed.
    #[test]
    fn no_word_in_two_lists_without_a_reason() {
        let mut seen: std::collections::HashMap<&str, Vec<&str>> = std::collections::HashMap::new();
        for list in LISTS {
            for &w in list.words {
                seen.entry(w).or_default().push(list.name);
            }
        }
        let marker_names: Vec<&str> = LISTS.iter().filter(|l| matches!(l.role, Role::Marker { .. })).map(|l| l.name).collect();
        let mut bad = Vec::new();
        for (w, names) in &seen {
            for (i, a) in names.iter().enumerate() {
                for b in &names[i + 1..] {
                    if a == b {
                        bad.push(format!("{w:?} twice in {a}"));
                        continue;
                    }
                    if marker_names.contains(a) && marker_names.contains(b) {
                        bad.push(format!("{w:?} in two marker lists: {a}, {b}"));
                        continue;
                    }
                    let ok = SHARED.iter().any(|&(x, y, _)| (x == *a && y == *b) || (x == *b && y == *a));
                    if !ok {
                        bad.push(format!("{w:?} in {a} and {b}: no reason in SHARED"));
                    }
                }
            }
        }
        bad.sort();
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// Every reason in [`SHARED`] is used: a stale one misleads the next reader.
    #[test]
    fn every_shared_reason_is_used() {
        for &(a, b, why) in SHARED {
            let la = LISTS.iter().find(|l| l.name == a).unwrap_or_else(|| panic!("no list {a}"));
            let lb = LISTS.iter().find(|l| l.name == b).unwrap_or_else(|| panic!("no list {b}"));
            assert!(la.words.iter().any(|w| lb.words.contains(w)), "{a}/{b} share no word ({why})");
        }
    }

    #[test]
    fn every_list_is_documented_and_lowercase() {
        for list in LISTS {
            assert!(!list.doc.is_empty(), "{}", list.name);
            for w in list.words {
                assert_eq!(*w, w.to_lowercase(), "{} in {}", w, list.name);
            }
        }
    }

    #[test]
    fn lookups() {
        assert_eq!(lookup("failed").marker, Some((Failure, true)));
        assert_eq!(lookup("started").marker, Some((Pending, false)));
        assert!(lookup("without").lists.contains(Lists::WEAK_NEGATOR) && !lookup("without").lists.contains(Lists::STRONG_NEGATOR));
        assert_eq!(lookup("dozen").num, Some(12));
        assert_eq!(lookup("pulls").kind, Some("pr"));
        assert_eq!(lookup("request").kind, None, "request is a PR only after pull/merge");
        assert!(lookup("in").phrases != 0 && lookup("zebra").phrases == 0);
        assert_eq!(lookup("").lists, Lists::default());
    }
}
