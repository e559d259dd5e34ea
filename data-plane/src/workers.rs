//! The threads that serve client connections: by default one per core, each
//! running a single-threaded Tokio runtime of its own that keeps every
//! connection dealt to it (`http::accept`), its requests and their upstream
//! connections (see `current`) on that one thread. No task moves between
//! threads and none wakes another thread, which is what a work-stealing
//! runtime spends much of a short request on: on the benchmark's two cores
//! a connection served this way took about a third less CPU than on the
//! multi-threaded runtime.
//!
//! The rest of the data plane (the accept loop, discovery, the spool
//! writer, the reporter) stays on the runtime that called `start`. Tasks a
//! request spawns run on its worker, which therefore lives until the data
//! plane is released, after the last usage report, so none of them is cut
//! short by a shutdown.

use std::{cell::Cell, future::Future, io, thread::JoinHandle};

use tokio::sync::{oneshot, watch};

thread_local! {
    /// The index of the worker this thread is, if it is one.
    static INDEX: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The running workers.
pub struct Workers {
    /// Each worker's word that its server has stopped.
    served: Vec<oneshot::Receiver<()>>,
    /// `true`: drop every connection now. Dropping it does the same.
    cut: watch::Sender<bool>,
    /// `true`: the data plane has stopped; end the threads. Dropping it
    /// does the same.
    release: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
}

/// The worker running on this thread (`0..count`), if any: what keeps
/// per-worker state, such as the upstream connection pools, apart.
pub fn current() -> Option<usize> {
    INDEX.with(Cell::get)
}

/// One worker per core, or 1 when the count of cores is unknown.
pub fn default_count() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Starts one worker per element of `inputs`, each running
/// `serve(index, input)` on its own thread and runtime until it ends.
pub fn spawn<T, F, S>(inputs: Vec<T>, serve: F) -> io::Result<Workers>
where
    T: Send + 'static,
    F: Fn(usize, T) -> S + Send + Sync + 'static,
    S: Future<Output = ()> + 'static,
{
    let serve = std::sync::Arc::new(serve);
    let (cut, cut_rx) = watch::channel(false);
    let (release, release_rx) = watch::channel(false);
    let mut served = Vec::with_capacity(inputs.len());
    let mut threads = Vec::with_capacity(inputs.len());
    for (index, input) in inputs.into_iter().enumerate() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (done, result) = oneshot::channel();
        let (serve, mut cut, mut release) = (serve.clone(), cut_rx.clone(), release_rx.clone());
        let thread = std::thread::Builder::new().name(format!("gw-worker-{index}")).spawn(move || {
            INDEX.with(|slot| slot.set(Some(index)));
            runtime.block_on(async move {
                tokio::select! {
                    () = serve(index, input) => {}
                    _ = cut.wait_for(|cut| *cut) => {}
                }
                let _ = done.send(());
                tokio::select! {
                    _ = cut.wait_for(|cut| *cut) => {}
                    _ = release.wait_for(|release| *release) => {}
                }
            });
            runtime.shutdown_background();
        })?;
        served.push(result);
        threads.push(thread);
    }
    Ok(Workers { served, cut, release, threads })
}

// === impl Workers ===

impl Workers {
    /// Waits for every worker's server to stop; fails if a worker's
    /// thread died instead.
    pub async fn served(&mut self) -> io::Result<()> {
        let mut outcome = Ok(());
        for done in &mut self.served {
            outcome = outcome.and(done.await.map_err(|_| io::Error::other("a worker thread died")));
        }
        outcome
    }

    /// Drops every connection still open.
    pub fn cut(&self) {
        let _ = self.cut.send(true);
    }

    /// Ends the threads once the data plane has stopped, and waits for them.
    pub fn release(self) {
        let _ = self.release.send(true);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn each_worker_serves_on_a_thread_of_its_own_and_knows_its_index() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut workers = spawn(vec!['a', 'b', 'c'], {
            let seen = seen.clone();
            move |index, input| {
                let seen = seen.clone();
                async move {
                    let thread = std::thread::current().name().map(str::to_owned);
                    seen.lock().unwrap().push((index, input, current(), thread));
                }
            }
        })
        .unwrap();
        workers.served().await.unwrap();
        workers.release();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        let expected: Vec<_> = ['a', 'b', 'c']
            .into_iter()
            .enumerate()
            .map(|(i, c)| (i, c, Some(i), Some(format!("gw-worker-{i}"))))
            .collect();
        assert_eq!(seen, expected);
        assert_eq!(current(), None, "the caller's thread is no worker");
    }

    /// One worker whose server spawns a task that reports after 200 ms, as a
    /// lease return outlives its request, then serves forever or ends at once.
    fn with_a_late_task(forever: bool) -> (Workers, tokio::sync::mpsc::UnboundedReceiver<()>) {
        let (finished, finished_rx) = tokio::sync::mpsc::unbounded_channel();
        let workers = spawn(vec![()], move |_, ()| {
            let finished = finished.clone();
            async move {
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    let _ = finished.send(());
                });
                if forever {
                    std::future::pending::<()>().await;
                }
            }
        })
        .unwrap();
        (workers, finished_rx)
    }

    #[tokio::test]
    async fn cut_stops_a_server_and_drops_what_it_spawned() {
        let (mut workers, mut finished) = with_a_late_task(true);
        workers.cut();
        workers.served().await.unwrap();
        workers.release();
        assert!(finished.recv().await.is_none());
    }

    #[tokio::test]
    async fn tasks_a_server_spawned_run_until_release() {
        let (mut workers, mut finished) = with_a_late_task(false);
        workers.served().await.unwrap();
        assert_eq!(finished.recv().await, Some(()));
        workers.release();
    }
}
