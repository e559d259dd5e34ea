//! How results are shown: aligned tables and `key: value` blocks for
//! people (`-o table`, `-o wide`), the `schema` structs as JSON or YAML for
//! scripts, comma-separated values of the table's columns for
//! spreadsheets (`-o csv`), bare ids for `xargs` (`-o name`). A list is a page; when more
//! items exist, JSON and YAML carry the `continue` token and the other
//! forms say so on stderr, so a list never stops silently.

use std::io::Write;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};

use crate::money;
use crate::schema;

/// How to print results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    #[default]
    Table,
    /// The table with more columns.
    Wide,
    /// The documented JSON contract (see docs/gwctl.md).
    Json,
    /// The same fields as YAML.
    Yaml,
    /// The wide table's columns as CSV (RFC 4180), for spreadsheets.
    Csv,
    /// Ids only, one a line, for xargs.
    Name,
}

/// serde_json's pretty layout with floats in plain decimal notation: its own
/// float printer writes 1 µ$ (`0.000001`) as `1e-6`.
struct PlainNumbers<'a>(PrettyFormatter<'a>);

/// A resource gwctl can print.
pub trait Render {
    /// Column titles of the list table.
    const COLUMNS: &'static [&'static str];

    /// Columns `-o wide` adds after `COLUMNS`.
    const WIDE: &'static [&'static str] = &[];

    /// Its shape in the JSON contract.
    type Json: Serialize;

    /// The object scripts see.
    fn json(&self) -> Self::Json;

    /// What `get` and the other verbs accept to name it: its id.
    fn name(&self) -> String;

    /// One row of the list table, in `COLUMNS` order.
    fn row(&self) -> Vec<String>;

    /// The `WIDE` cells of the row.
    fn wide_row(&self) -> Vec<String> {
        Vec::new()
    }

    /// Every field, labelled, for `get`, `create` and `update`.
    fn fields(&self) -> Vec<(&'static str, String)>;
}

/// One resource: an object, labelled fields, or its id.
pub fn render_one<T: Render>(out: Output, item: &T) -> Result<String> {
    match out {
        Output::Json => json_text(&item.json()),
        Output::Yaml => yaml_text(&item.json()),
        Output::Table | Output::Wide => Ok(fields_text(&item.fields())),
        Output::Csv => {
            let (labels, values): (Vec<&str>, Vec<String>) = item.fields().into_iter().unzip();
            Ok(csv_text(&labels, &[values]))
        }
        Output::Name => Ok(format!("{}\n", item.name())),
    }
}

/// What a verb that changes one object (update, enable, disable, top-up)
/// did: one line for people (`token tok_1 disabled`), the whole object with
/// `-o wide`, `json` or `yaml`, its id with `-o name`. Scripts running such
/// verbs over many objects get a line each, not a page each.
pub fn render_changed<T: Render>(out: Output, kind: &str, item: &T, what: &str) -> Result<String> {
    match out {
        Output::Table => Ok(format!("{kind} {} {what}\n", item.name())),
        Output::Wide => Ok(fields_text(&item.fields())),
        _ => render_one(out, item),
    }
}

/// A page of a list: `{"items": […], "continue": …}`, a table, or ids.
/// `next` is the token of the next page, empty on the last; the table and
/// name forms print it on stderr.
pub fn render_list<T: Render>(out: Output, items: &[T], next: &str) -> Result<String> {
    let list = || schema::List {
        items: items.iter().map(Render::json).collect(),
        next: (!next.is_empty()).then(|| next.to_owned()),
    };
    let text = match out {
        Output::Json => return json_text(&list()),
        Output::Yaml => return yaml_text(&list()),
        Output::Table => table_text(T::COLUMNS, &items.iter().map(Render::row).collect::<Vec<_>>()),
        Output::Wide | Output::Csv => {
            let columns: Vec<&str> = T::COLUMNS.iter().chain(T::WIDE).copied().collect();
            let rows: Vec<Vec<String>> = items
                .iter()
                .map(|item| {
                    let mut row = item.row();
                    row.extend(item.wide_row());
                    row
                })
                .collect();
            if out == Output::Csv { csv_text(&columns, &rows) } else { table_text(&columns, &rows) }
        }
        Output::Name => items.iter().map(|item| format!("{}\n", item.name())).collect(),
    };
    if !next.is_empty() {
        eprintln!("more results: add --continue {next}");
    }
    Ok(text)
}

/// The outcome of a delete (or of `--dry-run`): an object, a sentence, or
/// the id.
pub fn render_deleted(out: Output, kind: &str, id: &str, dry_run: bool) -> Result<String> {
    let deleted = schema::Deleted { kind: kind.to_owned(), id: id.to_owned(), deleted: !dry_run, dry_run };
    match out {
        Output::Json => json_text(&deleted),
        Output::Yaml => yaml_text(&deleted),
        Output::Name => Ok(format!("{id}\n")),
        Output::Csv => Ok(csv_text(
            &["kind", "id", "deleted", "dry_run"],
            &[vec![kind.to_owned(), id.to_owned(), (!dry_run).to_string(), dry_run.to_string()]],
        )),
        Output::Table | Output::Wide if dry_run => Ok(format!("would delete {kind} {id:?} (dry run)\n")),
        Output::Table | Output::Wide => Ok(format!("deleted {kind} {id:?}\n")),
    }
}

/// Writes to stdout; a closed pipe (`gwctl … | head`) is not an error.
pub fn emit(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}

/// Pretty JSON with a trailing newline; numbers are plain decimals
/// (`0.000001`, never `1e-6`).
pub fn json_text(value: &impl Serialize) -> Result<String> {
    let mut bytes = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, PlainNumbers(PrettyFormatter::new()));
    value.serialize(&mut serializer).context("encoding JSON")?;
    let mut text = String::from_utf8(bytes).context("encoding JSON")?;
    text.push('\n');
    Ok(text)
}

/// YAML of the same fields as the JSON.
pub fn yaml_text(value: &impl Serialize) -> Result<String> {
    serde_norway::to_string(value).context("encoding YAML")
}

/// Columns padded to their widest cell, two spaces apart, no trailing blanks.
pub fn table_text(columns: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    let mut text = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = width.saturating_sub(cell.chars().count());
            line.extend(std::iter::repeat_n(' ', pad));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// A header line and one line per row, comma-separated; a cell holding a
/// comma, quote or line break is quoted with its quotes doubled (RFC 4180).
pub fn csv_text(columns: &[&str], rows: &[Vec<String>]) -> String {
    let cell = |text: &str| {
        if text.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", text.replace('"', "\"\""))
        } else {
            text.to_owned()
        }
    };
    let mut text = String::new();
    let header: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        text.push_str(&row.iter().map(|c| cell(c)).collect::<Vec<_>>().join(","));
        text.push_str("\r\n");
    }
    text
}

/// `label:  value` lines with the values aligned.
pub fn fields_text(fields: &[(&str, String)]) -> String {
    let width = fields.iter().map(|(label, _)| label.chars().count()).max().unwrap_or(0);
    let mut text = String::new();
    for (label, value) in fields {
        let pad = width - label.chars().count();
        let line = format!("{label}:{}  {value}", " ".repeat(pad));
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// A Unix time for people: RFC 3339 in UTC, `-` for 0 ("not set").
pub fn time(seconds: i64) -> String {
    if seconds == 0 {
        return "-".to_string();
    }
    chrono::DateTime::from_timestamp(seconds, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| seconds.to_string())
}

/// A list for people: comma-joined, or `empty` when there is nothing.
pub fn list(items: &[String], empty: &str) -> String {
    if items.is_empty() { empty.to_string() } else { items.join(",") }
}

/// `$1.500000`.
pub fn usd(micros: i64) -> String {
    format!("${}", money::format_usd(micros))
}

// === impl PlainNumbers ===

impl Formatter for PlainNumbers<'_> {
    fn write_f64<W: ?Sized + Write>(&mut self, writer: &mut W, value: f64) -> std::io::Result<()> {
        // `Display` is the shortest text that reads back as the same double,
        // like serde_json's, but never uses an exponent; `.0` keeps whole
        // numbers looking like floats (`5.0`) as serde_json writes them.
        let text = value.to_string();
        writer.write_all(text.as_bytes())?;
        if text.contains('.') { Ok(()) } else { writer.write_all(b".0") }
    }

    fn begin_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(writer)
    }
}

/// A rate limit for people: `60/1min`, or `-` when off.
pub fn rate_limit(limit: Option<&gw_proto::pb::RateLimit>) -> String {
    match limit {
        Some(l) if l.window_minutes > 0 => format!("{}/{}min", l.max_requests, l.window_minutes),
        _ => "-".to_string(),
    }
}

/// A count limit for people: the number, or `-` when 0 (no limit).
pub fn count_limit(limit: u32) -> String {
    if limit == 0 { "-".to_string() } else { limit.to_string() }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn table_columns_are_padded_to_the_widest_cell() {
        let rows = vec![
            vec!["acc_1".to_string(), "acme".to_string(), "x".to_string()],
            vec!["acc_22".to_string(), "b".to_string(), "".to_string()],
        ];
        let text = table_text(&["ID", "NAME", "NOTE"], &rows);
        assert_eq!(text, "ID      NAME  NOTE\nacc_1   acme  x\nacc_22  b\n");
    }

    #[test]
    fn csv_quotes_only_cells_that_need_it() {
        let rows = vec![vec!["a,b".to_string(), "say \"hi\"".to_string(), "plain".to_string()]];
        let text = csv_text(&["X", "Y", "Z"], &rows);
        assert_eq!(text, "X,Y,Z\r\n\"a,b\",\"say \"\"hi\"\"\",plain\r\n");
    }

    #[test]
    fn fields_are_aligned_after_the_label() {
        let text = fields_text(&[("id", "a".into()), ("balance", "$1.000000".into()), ("name", "".into())]);
        assert_eq!(text, "id:       a\nbalance:  $1.000000\nname:\n");
    }

    #[test]
    fn times_print_as_utc_rfc3339() {
        assert_eq!(time(0), "-");
        assert_eq!(time(1_798_761_600), "2027-01-01T00:00:00Z");
    }

    #[test]
    fn json_numbers_print_as_plain_decimals() {
        let value = serde_json::json!({"ratio": 1e-6, "tokens": [7, -2], "used": 5.0});
        let text = json_text(&value).unwrap();
        let expected = "{\n  \"ratio\": 0.000001,\n  \"tokens\": [\n    7,\n    -2\n  ],\n  \"used\": 5.0\n}\n";
        assert_eq!(text, expected);
        let same = serde_json::to_string_pretty(&serde_json::json!({"a": [1.5, {}], "b": {"c": []}})).unwrap();
        assert_eq!(json_text(&serde_json::json!({"a": [1.5, {}], "b": {"c": []}})).unwrap(), same + "\n");
    }

    #[test]
    fn yaml_has_the_json_fields() {
        let deleted = schema::Deleted { kind: "token".into(), id: "tok_1".into(), deleted: false, dry_run: true };
        let text = render_deleted(Output::Yaml, "token", "tok_1", true).unwrap();
        assert_eq!(text, "kind: token\nid: tok_1\ndeleted: false\ndry_run: true\n");
        assert_eq!(yaml_text(&deleted).unwrap(), text);
        assert_eq!(render_deleted(Output::Name, "token", "tok_1", false).unwrap(), "tok_1\n");
    }
}
