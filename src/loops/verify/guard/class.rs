//! The outcome classes a memory can state (`polarity:<class>`), and which of them a query that
//! states one accepts. The rules ([`super::rules`]) say *where* a memory states a class; this
//! file says what the classes are and how they relate.

/// An outcome class a memory can state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    Negation,
    Failure,
    Refusal,
    Partial,
    Pending,
    Planned,
    Reverted,
    Unpaid,
    Uncertain,
}

use Class::*;

impl Class {
    pub(super) const ALL: [Class; 9] = [Negation, Failure, Refusal, Partial, Pending, Planned, Reverted, Unpaid, Uncertain];

    /// The rule name a rejection for this class carries.
    pub(super) fn rule(self) -> &'static str {
        match self {
            Negation => "polarity:negation",
            Failure => "polarity:failure",
            Refusal => "polarity:refusal",
            Partial => "polarity:partial",
            Pending => "polarity:pending",
            Planned => "polarity:planned",
            Reverted => "polarity:reverted",
            Unpaid => "polarity:unpaid",
            Uncertain => "polarity:uncertain",
        }
    }

    /// Classes a query stating `self` also accepts: a query about a failure is answered by a
    /// memory that says "did not succeed" or "was rolled back" as well as "failed".
    fn family(self) -> Classes {
        let of = |cs: &[Class]| cs.iter().fold(Classes::of(self), |s, &c| s.with(c));
        match self {
            Negation => of(&[Failure, Refusal, Pending, Partial, Unpaid]),
            Failure => of(&[Negation, Refusal, Reverted, Partial]),
            Refusal => of(&[Negation, Failure]),
            Partial => of(&[Pending, Negation]),
            Pending => of(&[Partial, Planned, Negation]),
            Planned => of(&[Pending, Uncertain]),
            Reverted => of(&[Failure]),
            Unpaid => of(&[Negation, Pending]),
            Uncertain => of(&[]),
        }
    }
}

/// A set of classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Classes(u16);

impl Classes {
    pub(super) fn of(c: Class) -> Classes {
        Classes(1 << c as u16)
    }

    pub(super) fn with(self, c: Class) -> Classes {
        Classes(self.0 | Classes::of(c).0)
    }

    pub(super) fn contains(self, c: Class) -> bool {
        self.0 & Classes::of(c).0 != 0
    }

    pub(super) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Every class of the set together with its family (what a query stating them accepts).
    pub(super) fn widened(self) -> Classes {
        Class::ALL.iter().filter(|&&c| self.contains(c)).fold(Classes::default(), |s, &c| Classes(s.0 | c.family().0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_holds_its_own_class() {
        for c in Class::ALL {
            assert!(c.family().contains(c), "{c:?}");
        }
    }

    #[test]
    fn widening_joins_families() {
        let asked = Classes::of(Failure);
        let w = asked.widened();
        assert!(w.contains(Negation) && w.contains(Reverted) && !w.contains(Planned));
        assert!(Classes::default().widened().is_empty());
        // Uncertainty widens to nothing else: a question accepts no stated outcome.
        assert_eq!(Classes::of(Uncertain).widened(), Classes::of(Uncertain));
    }
}
