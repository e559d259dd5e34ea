//! The one accept loop in front of the workers. It takes a connection slot
//! (so at most `max_connections` are open; further clients wait in the
//! kernel's backlog), accepts, and deals the connection to the worker with
//! the fewest open connections, the next one in turn on a tie. A connection
//! stays on the worker it was dealt to, so dealing by count rather than
//! letting whichever worker wakes first accept keeps a client with a few
//! long-lived connections (a load balancer, say) from landing them all on
//! one core.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::{
    net::TcpListener,
    sync::{OwnedSemaphorePermit, Semaphore, mpsc},
};

/// A connection dealt to a worker.
#[derive(Debug)]
pub struct Accepted {
    /// Non-blocking, registered with no runtime yet.
    pub stream: std::net::TcpStream,
    pub peer: SocketAddr,
    /// Keep it while the connection is open.
    pub held: Held,
}

/// What an open connection holds: its connection slot, and its place in
/// its worker's count. Both are given back when it is dropped.
#[derive(Debug)]
pub struct Held {
    _slot: OwnedSemaphorePermit,
    _open: Open,
}

/// Where the accept loop deals connections: one queue per worker, and how
/// many connections each worker has open.
pub struct Dealer {
    queues: Vec<mpsc::UnboundedSender<Accepted>>,
    open: Arc<[AtomicUsize]>,
    next: usize,
}

/// One open connection on worker `index`, counted while it lives.
#[derive(Debug)]
struct Open {
    counts: Arc<[AtomicUsize]>,
    index: usize,
}

// === impl Dealer ===

impl Dealer {
    /// A dealer to `workers` workers, and the queue each worker takes its
    /// connections from (index for index). A queue ends when the dealer is
    /// dropped, which `accept` does when it stops.
    pub fn new(workers: usize) -> (Dealer, Vec<mpsc::UnboundedReceiver<Accepted>>) {
        let (queues, receivers) = (0..workers.max(1)).map(|_| mpsc::unbounded_channel()).unzip();
        let open: Arc<[AtomicUsize]> = (0..workers.max(1)).map(|_| AtomicUsize::new(0)).collect();
        (Dealer { queues, open, next: 0 }, receivers)
    }

    /// How many connections each worker has open, by worker index.
    pub fn open(&self) -> Arc<[AtomicUsize]> {
        self.open.clone()
    }

    /// Hands `stream` to the least loaded worker whose queue is still
    /// taken from. Returns `false` when no worker takes connections any more.
    fn deal(&mut self, mut stream: std::net::TcpStream, peer: SocketAddr, mut slot: OwnedSemaphorePermit) -> bool {
        while let Some(index) = self.least_loaded() {
            self.open[index].fetch_add(1, Ordering::Relaxed);
            let open = Open { counts: self.open.clone(), index };
            let held = Held { _slot: slot, _open: open };
            match self.queues[index].send(Accepted { stream, peer, held }) {
                Ok(()) => {
                    self.next = (index + 1) % self.queues.len();
                    return true;
                }
                // That worker has stopped; its count drops with `back`.
                Err(mpsc::error::SendError(back)) => (stream, slot) = (back.stream, back.held._slot),
            }
        }
        false
    }

    /// The open worker with the fewest connections, counting from `next`
    /// so that ties go round in turn.
    fn least_loaded(&self) -> Option<usize> {
        let count = self.queues.len();
        (0..count)
            .map(|offset| (self.next + offset) % count)
            .filter(|&index| !self.queues[index].is_closed())
            .min_by_key(|&index| self.open[index].load(Ordering::Relaxed))
    }
}

// === impl Open ===

impl Drop for Open {
    fn drop(&mut self) {
        self.counts[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts on `listener` while a slot of `slots` is free and deals each
/// connection with `dealer`, until `shutdown` resolves or no worker takes
/// connections any more; then closes the listener and ends every queue.
pub async fn accept(
    listener: TcpListener,
    mut dealer: Dealer,
    slots: Arc<Semaphore>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else { break };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait and go on,
                    // never stop the listener.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Off this runtime's reactor: the worker registers it with its own.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, %peer, "handing a connection to a worker failed");
                continue;
            }
        };
        if !dealer.deal(stream, peer, slot) {
            break;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    /// Connects `n` clients to `addr`.
    async fn connect(addr: SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
        let mut clients = Vec::new();
        for _ in 0..n {
            clients.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        clients
    }

    /// Waits until `n` connections were dealt; what each worker got.
    async fn dealt(queues: &mut [mpsc::UnboundedReceiver<Accepted>], n: usize) -> Vec<Vec<Accepted>> {
        let mut by_worker: Vec<Vec<Accepted>> = queues.iter().map(|_| Vec::new()).collect();
        let mut got = 0;
        while got < n {
            for (index, queue) in queues.iter_mut().enumerate() {
                while let Ok(accepted) = queue.try_recv() {
                    by_worker[index].push(accepted);
                    got += 1;
                }
            }
            tokio::task::yield_now().await;
        }
        by_worker
    }

    fn serving(
        workers: usize,
        slots: usize,
    ) -> (SocketAddr, Vec<mpsc::UnboundedReceiver<Accepted>>, Arc<[AtomicUsize]>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (dealer, queues) = Dealer::new(workers);
        let open = dealer.open();
        let listener = TcpListener::from_std(listener).unwrap();
        tokio::spawn(accept(listener, dealer, Arc::new(Semaphore::new(slots)), std::future::pending()));
        (addr, queues, open)
    }

    fn counts(open: &[AtomicUsize]) -> Vec<usize> {
        open.iter().map(|count| count.load(Ordering::Relaxed)).collect()
    }

    #[tokio::test]
    async fn long_lived_connections_are_dealt_evenly_and_a_closed_ones_place_is_refilled() {
        let (addr, mut queues, open) = serving(3, 100);
        let _clients = connect(addr, 6).await;
        let mut by_worker = dealt(&mut queues, 6).await;
        assert_eq!(by_worker.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 2]);
        assert_eq!(counts(&open), [2, 2, 2]);
        // Worker 1's connections close: the next two go to it.
        by_worker[1].clear();
        assert_eq!(counts(&open), [2, 0, 2]);
        let _more = connect(addr, 2).await;
        let again = dealt(&mut queues, 2).await;
        assert_eq!(again.iter().map(Vec::len).collect::<Vec<_>>(), [0, 2, 0]);
        assert_eq!(counts(&open), [2, 2, 2]);
    }

    #[tokio::test]
    async fn a_worker_that_stopped_taking_connections_is_passed_over() {
        let (addr, mut queues, _open) = serving(2, 100);
        drop(queues.remove(0));
        let _clients = connect(addr, 3).await;
        assert_eq!(dealt(&mut queues, 3).await[0].len(), 3);
    }

    #[tokio::test]
    async fn beyond_the_slots_a_client_waits_until_a_connection_closes() {
        let (addr, mut queues, _open) = serving(2, 2);
        let _clients = connect(addr, 3).await;
        let mut by_worker = dealt(&mut queues, 2).await;
        // The third is in the backlog, not dealt, while both slots are held.
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(queues.iter_mut().all(|queue| queue.try_recv().is_err()));
        by_worker[0].clear();
        assert_eq!(dealt(&mut queues, 1).await.iter().map(Vec::len).sum::<usize>(), 1);
    }
}
