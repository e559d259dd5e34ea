//! Log lines on their way out, off the threads that log them. A logger
//! appends its formatted line to one shared buffer under a mutex and goes
//! on; a thread of our own swaps the buffer out and writes it with one
//! write(2), at most every `GATHER`, so a busy process makes one system
//! call per batch of lines rather than one per line, and wakes the writing
//! thread once per batch, not once per line. When `limit` bytes are queued
//! (the output is stuck: a full pipe, a paused terminal), loggers wait for
//! room rather than lose lines. Dropping the `Flusher` writes what is
//! queued; a line logged after that is written at once by its logger.

use std::{
    io::{self, Write},
    sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError},
    thread::JoinHandle,
    time::Duration,
};

use tracing_subscriber::fmt::MakeWriter;

/// How long the writing thread lets lines gather after the first one of a
/// batch arrives: the most a line waits before it is written.
const GATHER: Duration = Duration::from_millis(2);

/// Queued bytes past which loggers wait.
const LIMIT: usize = 8 << 20;

/// Where loggers put their lines (a `MakeWriter` for `tracing_subscriber`).
pub struct Lines<W> {
    shared: Arc<Shared<W>>,
}

/// Writes the queued lines until dropped, then writes what is left.
#[must_use = "dropping it stops the thread that writes the lines"]
pub struct Flusher<W> {
    shared: Arc<Shared<W>>,
    thread: Option<JoinHandle<()>>,
}

/// One logger's handle on the queue, made per line.
pub struct Sink<'a, W> {
    shared: &'a Shared<W>,
}

struct Shared<W> {
    queue: Mutex<Queue>,
    /// The writing thread waits here for a first line.
    ready: Condvar,
    /// Loggers wait here for room.
    room: Condvar,
    /// Held while writing, by the thread or (once closed) by a logger.
    out: Mutex<W>,
    limit: usize,
}

#[derive(Default)]
struct Queue {
    bytes: Vec<u8>,
    /// The writing thread sleeps on `ready`: the next line must wake it.
    idle: bool,
    closed: bool,
}

/// Lines written to `out` by a thread of their own.
pub fn spawn<W: Write + Send + 'static>(out: W) -> io::Result<(Lines<W>, Flusher<W>)> {
    spawn_with_limit(out, LIMIT)
}

fn spawn_with_limit<W: Write + Send + 'static>(out: W, limit: usize) -> io::Result<(Lines<W>, Flusher<W>)> {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        ready: Condvar::new(),
        room: Condvar::new(),
        out: Mutex::new(out),
        limit,
    });
    let thread = std::thread::Builder::new().name("gw-log-writer".into()).spawn({
        let shared = shared.clone();
        move || shared.run()
    })?;
    Ok((Lines { shared: shared.clone() }, Flusher { shared, thread: Some(thread) }))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

// === impl Shared ===

impl<W: Write> Shared<W> {
    /// The writing thread: waits for a first line, lets more gather, writes
    /// them all; until closed and drained.
    fn run(&self) {
        let mut batch = Vec::new();
        loop {
            let mut queue = lock(&self.queue);
            while queue.bytes.is_empty() && !queue.closed {
                queue.idle = true;
                queue = self.ready.wait(queue).unwrap_or_else(PoisonError::into_inner);
            }
            queue.idle = false;
            if queue.bytes.is_empty() {
                return; // closed, and nothing left
            }
            if !queue.closed {
                drop(queue);
                std::thread::sleep(GATHER);
                queue = lock(&self.queue);
            }
            std::mem::swap(&mut batch, &mut queue.bytes);
            // Loggers wait only on a queue at its limit.
            let full = batch.len() >= self.limit;
            drop(queue);
            if full {
                self.room.notify_all();
            }
            self.write(&batch);
            batch.clear();
        }
    }

    fn write(&self, bytes: &[u8]) {
        let mut out = lock(&self.out);
        // A log line that cannot be written has nowhere to be reported.
        let _ = out.write_all(bytes).and_then(|()| out.flush());
    }

    /// Queues `line`, waiting for room while the queue is full; once closed,
    /// writes it at once.
    fn push(&self, line: &[u8]) {
        let mut queue = lock(&self.queue);
        while queue.bytes.len() >= self.limit && !queue.closed {
            queue = self.room.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
        if queue.closed {
            drop(queue);
            self.write(line);
            return;
        }
        queue.bytes.extend_from_slice(line);
        if queue.idle {
            queue.idle = false;
            self.ready.notify_one();
        }
    }
}

// === impl Lines ===

impl<W> Clone for Lines<W> {
    fn clone(&self) -> Lines<W> {
        Lines { shared: self.shared.clone() }
    }
}

impl<'a, W: Write + 'a> MakeWriter<'a> for Lines<W> {
    type Writer = Sink<'a, W>;

    fn make_writer(&'a self) -> Sink<'a, W> {
        Sink { shared: &self.shared }
    }
}

// === impl Sink ===

impl<W: Write> Write for Sink<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.shared.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// === impl Flusher ===

impl<W> Drop for Flusher<W> {
    fn drop(&mut self) {
        let mut queue = lock(&self.shared.queue);
        queue.closed = true;
        drop(queue);
        self.shared.ready.notify_one();
        self.shared.room.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// An output the test can read back.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// An output that takes nothing until the test lets it.
    struct Gate {
        open: mpsc::Receiver<()>,
        inner: Capture,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _ = self.open.recv();
            self.inner.write(buf)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn log(lines: &Lines<impl Write>, line: &str) {
        lines.make_writer().write_all(line.as_bytes()).unwrap();
    }

    #[test]
    fn every_line_from_every_thread_arrives_whole_and_in_its_thread_order() {
        let capture = Capture::default();
        let (lines, flusher) = spawn(capture.clone()).unwrap();
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let lines = lines.clone();
                scope.spawn(move || {
                    for n in 0..2000 {
                        log(&lines, &format!("thread={thread} n={n} {}\n", "x".repeat(n % 50)));
                    }
                });
            }
        });
        drop(flusher);
        let text = String::from_utf8(lock(&capture.0).clone()).unwrap();
        let mut next = [0usize; 4];
        for line in text.lines() {
            let (thread, rest) = line.strip_prefix("thread=").unwrap().split_once(" n=").unwrap();
            let (n, pad) = rest.split_once(' ').unwrap_or((rest, ""));
            let (thread, n): (usize, usize) = (thread.parse().unwrap(), n.parse().unwrap());
            assert_eq!(n, next[thread], "thread {thread}'s lines out of order");
            assert_eq!(pad.len(), n % 50, "{line}");
            next[thread] += 1;
        }
        assert_eq!(next, [2000; 4]);
    }

    #[test]
    fn a_line_is_written_without_waiting_for_more() {
        let capture = Capture::default();
        let (lines, _flusher) = spawn(capture.clone()).unwrap();
        log(&lines, "alone\n");
        let started = std::time::Instant::now();
        while lock(&capture.0).is_empty() {
            assert!(started.elapsed() < Duration::from_secs(10), "the line was never written");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(&*lock(&capture.0), b"alone\n");
    }

    #[test]
    fn loggers_wait_for_room_when_the_output_is_stuck_and_lose_nothing() {
        let (open, gate) = mpsc::channel();
        let capture = Capture::default();
        let (lines, flusher) = spawn_with_limit(Gate { open: gate, inner: capture.clone() }, 64).unwrap();
        let logger = std::thread::spawn({
            let lines = lines.clone();
            move || {
                for n in 0..100 {
                    log(&lines, &format!("line {n:03} of the stuck output\n"));
                }
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!logger.is_finished(), "the logger went past a full queue");
        assert!(lock(&capture.0).is_empty());
        // Let every write through from now on.
        std::thread::spawn(move || while open.send(()).is_ok() {});
        logger.join().unwrap();
        drop(flusher);
        let text = String::from_utf8(lock(&capture.0).clone()).unwrap();
        let expected: String = (0..100).map(|n| format!("line {n:03} of the stuck output\n")).collect();
        assert_eq!(text, expected);
    }

    #[test]
    fn a_line_logged_after_the_flusher_is_gone_is_written_at_once() {
        let capture = Capture::default();
        let (lines, flusher) = spawn(capture.clone()).unwrap();
        log(&lines, "before\n");
        drop(flusher);
        log(&lines, "after\n");
        assert_eq!(&*lock(&capture.0), b"before\nafter\n");
    }
}
