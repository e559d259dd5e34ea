//! The event relay for every translated stream: an upstream dialect's
//! decoder into the internal form, the meter reading the form (answer text
//! and usage, whatever the dialects), and the client dialect's encoder.
//! Framing of the upstream is the caller's: SSE goes through
//! `meter::pump::Events`, which hands this relay one payload at a time.
//! `Metered` is the same without the encoder, for an SSE stream already in
//! the client's dialect: its bytes pass untouched, read only to meter.

use bytes::Bytes;

use crate::{
    meter::{Meter, pump::EventRelay},
    translate::ir::{Decode, Delta, Encode, Event},
};

/// An upstream stream decoded by `D` and written for the client by `E`.
pub struct Through<D, E> {
    decoder: D,
    encoder: E,
    /// The answer's first token (or its end) was decoded (see `begins`).
    started: bool,
    ended: bool,
}

/// An upstream stream in the client's dialect, passed on byte for byte and
/// decoded by `D` only to meter it.
pub struct Metered<D> {
    decoder: D,
    started: bool,
    ended: bool,
}

// === impl Through ===

impl<D: Decode, E: Encode> Through<D, E> {
    pub fn new(decoder: D, encoder: E) -> Through<D, E> {
        Through { decoder, encoder, started: false, ended: false }
    }

    /// Meters `events` and encodes them for the client.
    pub fn emit(&mut self, events: Vec<Event>, mut meter: Option<&mut Meter>) -> Bytes {
        let mut out = Vec::new();
        self.started |= events.iter().any(begins);
        for event in &events {
            if let Some(meter) = meter.as_deref_mut() {
                meter_event(event, meter);
            }
            self.encoder.push(event, &mut out);
            if *event == Event::End && !self.ended {
                self.ended = true;
                self.encoder.finish(&mut out);
                let mut dropped = self.decoder.dropped();
                dropped.extend(&self.encoder.dropped());
                super::note_dropped(&dropped, "stream");
            }
        }
        Bytes::from(out)
    }
}

/// Whether `event` is past the answer's opening (its start and the start
/// of its first block): a token, the end of a block or of the answer, or an
/// error. Usage alone is not: messages upstreams report the prompt's in
/// their opening event.
fn begins(event: &Event) -> bool {
    !matches!(event, Event::Start { .. } | Event::BlockStart { .. } | Event::Usage(_))
}

/// What the meter learns from one event: answer text (for an estimate when
/// no usage comes), content chunks, the usage reported.
pub fn meter_event(event: &Event, meter: &mut Meter) {
    match event {
        Event::Delta { delta: Delta::Text(text) | Delta::Thinking(text) | Delta::Arguments(text), .. } => {
            meter.add_text(text);
            meter.add_chunks(1);
        }
        Event::Usage(usage) => meter.observe(*usage),
        _ => {}
    }
}

impl<D: Decode, E: Encode> EventRelay for Through<D, E> {
    fn event(&mut self, _raw: Bytes, data: &[u8], meter: Option<&mut Meter>) -> Bytes {
        if data.is_empty() {
            return Bytes::new();
        }
        let mut meter = meter;
        if let Some(meter) = meter.as_deref_mut() {
            meter.read_event(data);
        }
        let events = self.decoder.push(data);
        self.emit(events, meter)
    }

    fn finish(&mut self, meter: Option<&mut Meter>) -> Bytes {
        let events = self.decoder.finish();
        self.emit(events, meter)
    }

    fn complete(&self) -> bool {
        self.ended
    }

    fn started(&self) -> bool {
        self.started
    }
}

// === impl Metered ===

impl<D: Decode> Metered<D> {
    pub fn new(decoder: D) -> Metered<D> {
        Metered { decoder, started: false, ended: false }
    }

    fn meter(&mut self, events: &[Event], meter: Option<&mut Meter>) {
        if let Some(meter) = meter {
            events.iter().for_each(|event| meter_event(event, meter));
        }
        self.started |= events.iter().any(begins);
        self.ended |= events.contains(&Event::End);
    }
}

impl<D: Decode> EventRelay for Metered<D> {
    fn event(&mut self, raw: Bytes, data: &[u8], meter: Option<&mut Meter>) -> Bytes {
        if !data.is_empty() {
            let mut meter = meter;
            if let Some(meter) = meter.as_deref_mut() {
                meter.read_event(data);
            }
            let events = self.decoder.push(data);
            self.meter(&events, meter);
        }
        raw
    }

    fn finish(&mut self, meter: Option<&mut Meter>) -> Bytes {
        let events = self.decoder.finish();
        self.meter(&events, meter);
        Bytes::new()
    }

    fn complete(&self) -> bool {
        self.ended
    }

    fn started(&self) -> bool {
        self.started
    }
}
