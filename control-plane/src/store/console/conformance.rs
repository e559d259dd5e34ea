//! The console store suite (being written).
