//! The agent plugin's files: they parse, carry the fields the hosts require, and every command
//! and tool they name exists in the binary and the MCP server.

use std::path::{Path, PathBuf};

use serde_json::Value;
use slm::mcp::Profile;

use crate::common::slm_bin;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn json_file(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Splits a markdown file into its YAML frontmatter (parsed) and body.
fn frontmatter(p: &Path) -> (serde_yaml_ng::Value, String) {
    let text = std::fs::read_to_string(p).unwrap();
    let rest = text.strip_prefix("---\n").unwrap_or_else(|| panic!("{} has no frontmatter", p.display()));
    let (yaml, body) = rest.split_once("\n---\n").unwrap_or_else(|| panic!("{} frontmatter not closed", p.display()));
    let v = serde_yaml_ng::from_str(yaml).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (v, body.to_string())
}

fn str_field<'a>(v: &'a serde_yaml_ng::Value, key: &str, file: &str) -> &'a str {
    v.get(key).and_then(|x| x.as_str()).filter(|s| !s.is_empty()).unwrap_or_else(|| panic!("{file}: missing {key}"))
}

/// Every `` `slm loop <sub>`` command a text shows (in backticks or after `Bash(`) must be a
/// real subcommand.
fn check_loop_commands(text: &str, file: &str) -> usize {
    let re = regex::Regex::new(r"(?:`|^)slm loop ([a-z]+)").unwrap();
    let mut n = 0;
    for cap in re.captures_iter(text) {
        let sub = &cap[1];
        let out = std::process::Command::new(slm_bin()).args(["loop", sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "{file} names `slm loop {sub}`, which does not exist");
        n += 1;
    }
    n
}

/// Every `slm_loop_*` tool a text mentions must be served by the code profile (.mcp.json's).
fn check_mcp_tools(text: &str, file: &str) -> usize {
    let re = regex::Regex::new(r"slm_loop_[a-z]+").unwrap();
    let tools: Vec<&str> = Profile::Code.tools().collect();
    let mut n = 0;
    for m in re.find_iter(text) {
        assert!(tools.contains(&m.as_str()), "{file} names MCP tool {} that the code profile lacks", m.as_str());
        n += 1;
    }
    n
}

#[test]
fn claude_code_plugin_manifests_parse_and_point_at_real_things() {
    let plugin = repo().join("plugin");
    let manifest = json_file(&plugin.join(".claude-plugin/plugin.json"));
    assert_eq!(manifest["name"], "slm-loop");
    assert!(manifest["description"].as_str().is_some_and(|d| !d.is_empty()));
    assert!(manifest["version"].is_string());

    let market = json_file(&repo().join(".claude-plugin/marketplace.json"));
    assert!(market["name"].is_string() && market["owner"]["name"].is_string());
    let entry = &market["plugins"][0];
    assert_eq!(entry["name"], manifest["name"]);
    assert!(repo().join(entry["source"].as_str().unwrap()).join(".claude-plugin/plugin.json").is_file());

    let mcp = json_file(&plugin.join(".mcp.json"));
    let server = &mcp["mcpServers"]["slm"];
    assert_eq!(server["command"], "slm");
    assert_eq!(server["args"], serde_json::json!(["mcp", "--profile", "code"]));
    let out = std::process::Command::new(slm_bin()).args(["mcp", "--help"]).output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("--profile"));
}

#[test]
fn command_agent_and_skill_have_the_fields_hosts_require() {
    let plugin = repo().join("plugin");
    let (cmd, body) = frontmatter(&plugin.join("commands/run.md"));
    str_field(&cmd, "description", "run.md");
    str_field(&cmd, "argument-hint", "run.md");
    let allowed = str_field(&cmd, "allowed-tools", "run.md");
    assert!(body.contains("$ARGUMENTS"));
    // Every allowed tool exists: Bash(slm loop X:*) subcommands and MCP loop tools.
    let mut bash = 0;
    let mut mcp = 0;
    for tool in allowed.split(", ") {
        if let Some(rest) = tool.strip_prefix("Bash(").and_then(|t| t.strip_suffix(":*)")) {
            bash += check_loop_commands(rest, "allowed-tools");
        } else if let Some(name) = tool.strip_prefix("mcp__plugin_slm-loop_slm__") {
            mcp += check_mcp_tools(name, "allowed-tools");
        } else {
            panic!("unexpected allowed tool {tool}");
        }
    }
    assert_eq!((bash, mcp), (5, 4));
    assert!(check_loop_commands(&body, "run.md") >= 5);

    let (agent, body) = frontmatter(&plugin.join("agents/slm-loop-runner.md"));
    assert_eq!(str_field(&agent, "name", "agent"), "slm-loop-runner");
    str_field(&agent, "description", "agent");
    assert!(check_loop_commands(&body, "agent") >= 3);

    let (skill, body) = frontmatter(&plugin.join("skills/slm-loop/SKILL.md"));
    assert_eq!(str_field(&skill, "name", "skill"), "slm-loop", "the name matches the folder");
    str_field(&skill, "description", "skill");
    assert!(check_loop_commands(&body, "skill") >= 4);
    assert!(check_mcp_tools(&body, "skill") >= 1);
}

#[test]
fn codex_skill_matches_and_its_config_parses() {
    let skill = repo().join("codex/skills/slm-loop");
    assert_eq!(
        std::fs::read_to_string(skill.join("SKILL.md")).unwrap(),
        std::fs::read_to_string(repo().join("plugin/skills/slm-loop/SKILL.md")).unwrap(),
        "the Codex skill is the same skill"
    );
    let meta: serde_yaml_ng::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(skill.join("agents/openai.yaml")).unwrap()).unwrap();
    let interface = meta.get("interface").expect("interface");
    str_field(interface, "display_name", "openai.yaml");
    str_field(interface, "short_description", "openai.yaml");
    let config: toml::Table = std::fs::read_to_string(repo().join("codex/config.toml")).unwrap().parse().unwrap();
    let slm = &config["mcp_servers"]["slm"];
    assert_eq!(slm["command"].as_str(), Some("slm"));
    assert!(slm["tool_timeout_sec"].as_integer().unwrap() > 120, "longer than the longest loop");
    assert!(slm["startup_timeout_sec"].as_integer().is_some());
}

#[test]
fn plugin_path_points_at_the_plugin() {
    let out = std::process::Command::new(slm_bin()).args(["plugin", "path"]).output().unwrap();
    assert!(out.status.success());
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(p.join(".claude-plugin/plugin.json").is_file(), "{}", p.display());
    let out = std::process::Command::new(slm_bin()).args(["plugin", "path", "--codex"]).output().unwrap();
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(p.join("SKILL.md").is_file(), "{}", p.display());
}

/// The names Claude Code gives the plugin's commands, skills and agents: `plugin:file-stem`
/// for commands, the skill's folder, the agent's `name`.
fn plugin_names(kind: &str) -> Vec<String> {
    let dir = repo().join("plugin").join(kind);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| match kind {
            "commands" => p.file_stem().unwrap().to_string_lossy().into_owned(),
            "skills" => p.file_name().unwrap().to_string_lossy().into_owned(),
            _ => str_field(&frontmatter(&p).0, "name", "agent").to_string(),
        })
        .collect();
    names.sort();
    names
}

#[test]
fn commands_skills_and_agents_have_distinct_names_and_the_readme_uses_them() {
    let commands = plugin_names("commands");
    let skills = plugin_names("skills");
    let agents = plugin_names("agents");
    let mut all: Vec<&String> = commands.iter().chain(&skills).chain(&agents).collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "commands {commands:?}, skills {skills:?} and agents {agents:?} share a name");
    for skill in &skills {
        let (fm, _) = frontmatter(&repo().join("plugin/skills").join(skill).join("SKILL.md"));
        assert_eq!(str_field(&fm, "name", "SKILL.md"), skill, "a skill's name is its folder's");
    }

    // Claude Code calls a plugin command `/<plugin>:<command>`: every slash invocation the README
    // and the plugin's manifests show must be one of those (a bare `/slm-loop` is unknown).
    let plugin = json_file(&repo().join("plugin/.claude-plugin/plugin.json"))["name"].as_str().unwrap().to_string();
    let real: Vec<String> = commands.iter().map(|c| format!("/{plugin}:{c}")).collect();
    let re = regex::Regex::new(r"(?:^|[\s`(])(/slm[a-z-]*(?::[a-z-]+)?)").unwrap();
    let mut shown = 0;
    for file in ["README.md", "plugin/.claude-plugin/plugin.json", ".claude-plugin/marketplace.json"] {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        for cap in re.captures_iter(&text) {
            assert!(real.contains(&cap[1].to_string()), "{file} shows {}, but the plugin's commands are {real:?}", &cap[1]);
            shown += 1;
        }
    }
    assert!(shown >= 3, "the README shows how to invoke the command");
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(readme.contains(&format!("{} fix-tests -- ", real[0])), "the README shows a full invocation");

    // Codex names a skill `$<name>` in a prompt.
    let meta: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(repo().join("codex/skills/slm-loop/agents/openai.yaml")).unwrap()).unwrap();
    let prompt = str_field(meta.get("interface").unwrap(), "default_prompt", "openai.yaml");
    assert!(prompt.contains("$slm-loop"), "default_prompt names the skill as $slm-loop: {prompt}");
}

/// Claude Code's own validator (`claude plugin validate`, from `@anthropic-ai/claude-code` pinned
/// in tests/claude-code, installed by scripts/test.sh) accepts the plugin and the marketplace.
#[test]
fn claude_code_validates_the_plugin_and_the_marketplace() {
    let dir = repo().join("tests/claude-code");
    let claude = dir.join("node_modules/.bin/claude");
    if !claude.exists() {
        // scripts/test.sh writes this marker when npm cannot install Claude Code here.
        let failed = dir.join("node_modules.install-failed");
        assert!(failed.exists(), "{} is missing: run scripts/test.sh (it runs `npm ci` in tests/claude-code)", claude.display());
        eprintln!("skipped: Claude Code did not install: {}", std::fs::read_to_string(failed).unwrap_or_default());
        return;
    }
    let home = tempfile::tempdir().unwrap();
    for target in [repo().join("plugin"), repo()] {
        let out = std::process::Command::new(&claude)
            .args(["plugin", "validate"])
            .arg(&target)
            .env("HOME", home.path())
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("Validation passed"), "claude plugin validate {}:\n{text}", target.display());
    }
}
