//! The PostgreSQL side of the change feed: a thread per feed that LISTENs on its own
//! connection and bumps the feed's signals when any host commits (writers NOTIFY inside their
//! transactions, so a notification arrives only once the rows are visible).
//!
//! A lost connection (server restart, network) leaves waiting loops on their poll interval,
//! which is always their fallback; the thread reconnects with a growing backoff and, once it
//! listens again, wakes every waiter once, so nothing committed during the gap waits longer
//! than a look.

use std::sync::mpsc;
use std::time::Duration;

use ::postgres::fallible_iterator::FallibleIterator;
use ::postgres::Client;

use super::{channel, PgUrl};
use crate::feed::{Notifier, Topic};

/// The longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How often an idle listener checks that its feed still exists.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// How long [`spawn`] waits for the first LISTEN, so a loop that looks right after starting
/// its feed cannot miss a commit made before the listener was subscribed.
const FIRST_LISTEN: Duration = Duration::from_secs(5);

const TOPICS: [Topic; 3] = [Topic::Memories, Topic::Control, Topic::Ledger];

/// Starts the listener for `feed`; returns once it listens (or its first attempt failed).
pub fn spawn(url: PgUrl, feed: Notifier) {
    let (ready, listening) = mpsc::channel();
    let started = std::thread::Builder::new().name("slm-pg-listen".into()).spawn(move || run(&url, &feed, ready));
    match started {
        Ok(_) => {
            let _ = listening.recv_timeout(FIRST_LISTEN);
        }
        Err(e) => tracing::warn!("cannot start the PostgreSQL listener, loops will poll: {e}"),
    }
}

fn listen(url: &PgUrl) -> crate::Result<Client> {
    let mut c = url.connect()?;
    let sql: String = TOPICS.iter().map(|t| format!("LISTEN {};", channel(*t))).collect();
    c.batch_execute(&sql).map_err(|e| super::pg_error(url.redacted(), &e))?;
    Ok(c)
}

fn topic_of(name: &str) -> Option<Topic> {
    TOPICS.into_iter().find(|t| channel(*t) == name)
}

fn run(url: &PgUrl, feed: &Notifier, ready: mpsc::Sender<()>) {
    let mut backoff = Duration::from_millis(100);
    let mut gap = false;
    loop {
        match listen(url) {
            Ok(mut client) => {
                let _ = ready.send(());
                backoff = Duration::from_millis(100);
                if gap && !feed.all() {
                    return;
                }
                if !follow(&mut client, feed) {
                    return;
                }
                // No wake-up now: the server is likely away, and a look would only fail.
                tracing::warn!("lost the PostgreSQL listener at {}; loops poll until it is back", url.redacted());
            }
            Err(e) => {
                let _ = ready.send(());
                tracing::warn!("PostgreSQL listener: {e}; retrying in {backoff:?}");
            }
        }
        gap = true;
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF);
        if feed.gone() {
            return;
        }
    }
}

/// Forwards notifications until the connection fails (true) or the feed is gone (false).
fn follow(client: &mut Client, feed: &Notifier) -> bool {
    loop {
        let next = client.notifications().timeout_iter(IDLE_CHECK).next();
        match next {
            Ok(Some(n)) => {
                if let Some(t) = topic_of(n.channel()) {
                    if !feed.topic(t) {
                        return false;
                    }
                }
            }
            Ok(None) if client.is_closed() => return true,
            Ok(None) => {
                if feed.gone() {
                    return false;
                }
            }
            Err(_) => return true,
        }
    }
}
