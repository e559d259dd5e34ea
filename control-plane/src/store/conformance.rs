//! The behaviour every `Store` backend must show; run by the tests of each.
