//! Views of the store that all the waiting loops of a process share, and how fresh they must
//! be.
//!
//! A thousand loops waiting in one `slm mcp` each look at the store every poll interval: has
//! a memory arrived (the gate's refresh), has someone asked this run to stop (the cancel
//! flag)? Asked separately, that is a thousand SQLite reads a second on one connection, most
//! of an idle loop's cost. A [`Fresh`] value is loaded once and shared while it is younger
//! than a maximum age *and* the change feed has announced nothing since the load began (the
//! feed generation is read before loading, so a commit racing the load forces the next
//! caller to load again). The maximum age bounds how stale a view can be whatever the feed
//! does: a writer that does not announce (an older slm, a lost watch) is seen within it.
//! [`crate::loops::host::LoopHost`] keeps one for the gate refresh and one for cancel requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::Result;

/// When a load began, the feed generation read before it, and what it loaded.
type Loaded<T> = (Instant, Option<u64>, Arc<T>);

/// A value loaded from the store, shared while fresh.
pub struct Fresh<T> {
    state: Mutex<Option<Loaded<T>>>,
}

impl<T> Default for Fresh<T> {
    fn default() -> Self {
        Fresh { state: Mutex::new(None) }
    }
}

impl<T> Fresh<T> {
    /// The shared value if it is younger than `max_age` and `generation` (the feed's, read
    /// by the caller just now; `None` without a feed) is the one read before it was loaded;
    /// else loads it with `load`. Callers that arrive during a load wait for it and share it.
    pub fn get(&self, generation: Option<u64>, max_age: Duration, load: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
        let mut st = self.state.lock();
        if let Some((at, g, v)) = st.as_ref() {
            if *g == generation && at.elapsed() < max_age {
                return Ok(Arc::clone(v));
            }
        }
        let at = Instant::now();
        let v = Arc::new(load()?);
        *st = Some((at, generation, Arc::clone(&v)));
        Ok(v)
    }

    /// Forgets the value: the next caller loads (this process has just written).
    pub fn invalidate(&self) {
        *self.state.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_value_is_shared_until_it_ages_or_the_feed_moves() {
        let f = Fresh::default();
        let loads = Cell::new(0);
        let load = || {
            loads.set(loads.get() + 1);
            Ok(loads.get())
        };
        let long = Duration::from_secs(3600);
        assert_eq!(*f.get(Some(1), long, load).unwrap(), 1);
        assert_eq!(*f.get(Some(1), long, load).unwrap(), 1, "same generation, young: shared");
        assert_eq!(*f.get(Some(2), long, load).unwrap(), 2, "the feed announced a change");
        assert_eq!(*f.get(None, long, load).unwrap(), 3, "the feed went away");
        assert_eq!(*f.get(None, Duration::ZERO, load).unwrap(), 4, "too old");
        f.invalidate();
        assert_eq!(*f.get(None, long, load).unwrap(), 5, "this process wrote");
        assert!(f.get(None, Duration::ZERO, || Err(crate::Error::Internal("down".into()))).is_err());
        assert_eq!(*f.get(None, long, load).unwrap(), 5, "a failed load keeps what was there");
    }
}
