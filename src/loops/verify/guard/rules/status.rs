//! `status`: a failing exit or HTTP status: "exit code 1", "exited with 137", "returned
//! 500", "HTTP 503"; not "exit code 0" or "HTTP 200".

use super::super::class::Class;
use super::super::lexicon::Lists;
use super::super::numbers::count_at;
use super::super::scope::Quiet;
use super::super::tokens::Text;
use super::{Hit, Rule};

pub(in super::super) struct Status;

impl Rule for Status {
    fn name(&self) -> &'static str {
        "status"
    }

    fn at(&self, t: &Text, j: usize, _quiet: &Quiet) -> Option<Hit> {
        let (k, failing) = if t.is(j, Lists::EXIT_VERB) && t.is(j + 1, Lists::EXIT_CODE) {
            let k = if matches!(t.w(j + 2), "code" | "status") { j + 3 } else { j + 2 };
            (k, count_at(t, k)? != 0)
        } else if t.is(j, Lists::HTTP_STATUS) {
            let n = count_at(t, j + 1)?;
            (j + 1, (400..600).contains(&n))
        } else {
            return None;
        };
        failing.then_some(Hit { class: Class::Failure, a: j, b: k })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_accepts, assert_rejects, fires};
    use super::*;

    #[test]
    fn finds_failing_statuses() {
        assert_eq!(fires(&Status, "job exited with code 137"), [(Class::Failure, "exited with code 137".to_string())]);
        assert_eq!(fires(&Status, "health check returned 503"), [(Class::Failure, "returned 503".to_string())]);
        assert_eq!(fires(&Status, "HTTP 404 on /api"), [(Class::Failure, "HTTP 404".to_string())]);
        assert!(fires(&Status, "exit code 0").is_empty());
        assert!(fires(&Status, "HTTP 200").is_empty());
        assert!(fires(&Status, "status page updated").is_empty());
    }

    #[test]
    fn rejects() {
        assert_rejects("nightly job finished", "nightly job finished with exit code 1", "polarity:failure");
        assert_rejects("health check ok", "health check returned 503", "polarity:failure");
    }

    #[test]
    fn accepts() {
        assert_accepts("nightly job finished", "nightly job finished, exit code 0");
        assert_accepts("job 7 finished", "job 7 finished. job 8 exited with code 2");
    }
}
