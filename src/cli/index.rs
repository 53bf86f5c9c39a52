//! `slm index`: the state of the data root's derived vector files, and `slm index rebuild`.
//!
//! The files are a cache of the store (see `index::derived` and `mirror`): searches keep them
//! up to date on their own, so this command is for looking, and for compacting after many
//! forgets or repairing by hand.

use clap::Subcommand;
use serde_json::json;

use slm::engine::Engine;
use slm::mirror::IndexFiles;

#[derive(Subcommand, Debug, Clone, Copy)]
pub enum IndexCommand {
    /// Rewrite the derived files from the store (drops forgotten rows), with a progress bar.
    Rebuild,
    /// Check the search against a brute-force scan on N generated queries (exit 1 on any
    /// difference).
    Verify {
        /// How many queries (1-10000).
        #[arg(long, default_value_t = 100)]
        queries: usize,
    },
}

/// Runs `slm index [rebuild]`.
pub fn dispatch(engine: &Engine, cmd: Option<IndexCommand>, json: bool) -> slm::Result<i32> {
    let files = match cmd {
        None => engine.index_files()?,
        Some(IndexCommand::Rebuild) => {
            super::attach_progress(engine, json, "rebuilding the vector files");
            engine.rebuild_index()?
        }
        Some(IndexCommand::Verify { queries }) => {
            let (n, bad) = engine.verify_index(queries)?;
            if json {
                println!("{}", json!({"queries": n, "mismatches": bad}));
            } else {
                println!("{n} queries, {bad} differ from a brute-force scan");
            }
            return Ok(if bad == 0 { 0 } else { super::EXIT_FAILURE });
        }
    };
    print(&files, json);
    Ok(0)
}

fn print(f: &IndexFiles, json: bool) {
    if json {
        println!("{}", json!(f));
        return;
    }
    println!("dir        {}", f.dir.display());
    println!("state      {}", f.state);
    if let Some(g) = f.generation {
        println!("generation {g}");
    }
    println!("rows       {}", f.rows);
    println!("upto id    {}", f.upto);
    println!("pending    {}", f.pending);
    println!("forgotten  {}", f.forgotten);
    println!("behind     {} (caught up by the next search)", f.behind);
    println!("bytes      {}", f.bytes);
    match &f.graph {
        Some(g) => {
            println!("graph      {} vectors up to id {}, {} bytes (HNSW, saved)", g.vectors, g.upto, g.bytes);
            match &g.links {
                Some(l) => println!("links      {} nodes up to id {}, {} bytes (mapped by every server)", l.nodes, l.upto, l.bytes),
                None if g.part => println!("links      none yet (the build is part-done)"),
                None => println!("links      none yet (the next server writes them from the saved graph)"),
            }
        }
        None => println!("graph      none saved (long-lived processes build one from 60,000 memories)"),
    }
}
