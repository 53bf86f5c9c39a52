//! MCP tool profiles: nested sets of tools, so a client can ask for a small surface.
//!
//! `core ⊂ code ⊂ full ⊂ power ⊂ whole`:
//! - `core`: the memory tools (`remember`, `recall`, `list_memories`, `forget`, `status`);
//! - `code`: + the loop tools (`slm_loop_run`, `slm_loop_history`, `slm_loop_show`, `slm_loop_cancel`);
//! - `full` (default): + `get_memories` (fetch by id);
//! - `power`: + `import_memories` (bulk remember);
//! - `whole`: + `slm_loop_demo` (the keyless demo loop).

use crate::{Error, Result};

/// A tool profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Profile {
    Core,
    Code,
    Full,
    Power,
    Whole,
}

/// Every tool with the smallest profile that has it.
pub const TOOLS: &[(&str, Profile)] = &[
    ("remember", Profile::Core),
    ("recall", Profile::Core),
    ("list_memories", Profile::Core),
    ("forget", Profile::Core),
    ("status", Profile::Core),
    ("slm_loop_run", Profile::Code),
    ("slm_loop_history", Profile::Code),
    ("slm_loop_show", Profile::Code),
    ("slm_loop_cancel", Profile::Code),
    ("get_memories", Profile::Full),
    ("import_memories", Profile::Power),
    ("slm_loop_demo", Profile::Whole),
];

impl Profile {
    /// Parses a profile name (`SLM_MCP_PROFILE` or `--profile`).
    pub fn parse(s: &str) -> Result<Profile> {
        match s {
            "core" => Ok(Profile::Core),
            "code" => Ok(Profile::Code),
            "full" => Ok(Profile::Full),
            "power" => Ok(Profile::Power),
            "whole" => Ok(Profile::Whole),
            other => Err(Error::invalid("profile", other, "must be one of core, code, full, power, whole")),
        }
    }

    /// The tools this profile exposes.
    pub fn tools(self) -> impl Iterator<Item = &'static str> {
        TOOLS.iter().filter(move |(_, p)| *p <= self).map(|(n, _)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_nest_and_loops_are_not_in_core() {
        let all = [Profile::Core, Profile::Code, Profile::Full, Profile::Power, Profile::Whole];
        for w in all.windows(2) {
            let small: Vec<_> = w[0].tools().collect();
            let big: Vec<_> = w[1].tools().collect();
            assert!(small.iter().all(|t| big.contains(t)) && big.len() > small.len());
        }
        assert!(!Profile::Core.tools().any(|t| t.starts_with("slm_loop")));
        assert!(Profile::Code.tools().any(|t| t == "slm_loop_run"));
        assert!(Profile::parse("nope").is_err());
    }
}
