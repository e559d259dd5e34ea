//! The cost-per-day chart: stacked bars, one colour per model, drawn as
//! SVG on the server (no script), with a legend and a text alternative.

use std::collections::BTreeMap;

use maud::{Markup, html};

use super::page::{self, money};

/// Colours the models take in turn (enough contrast on white).
const COLOURS: &[&str] = &["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];

/// One day's cost of one model.
pub struct Bar {
    pub day: i64,
    pub model: String,
    pub cost_micros: i64,
}

/// The chart of `bars` between `from` and `to` (Unix seconds, days).
pub fn cost_per_day(bars: &[Bar], from: i64, to: i64) -> Markup {
    const DAY: i64 = 86_400;
    let first = from - from.rem_euclid(DAY);
    let days = usize::try_from(((to - first) / DAY).clamp(1, 366)).unwrap_or(1);
    let mut models: Vec<&str> = bars.iter().map(|b| b.model.as_str()).collect();
    models.sort_unstable();
    models.dedup();
    let mut stacks: BTreeMap<usize, Vec<(usize, i64)>> = BTreeMap::new();
    for bar in bars {
        let Ok(index) = usize::try_from((bar.day - first) / DAY) else { continue };
        let colour = models.iter().position(|m| *m == bar.model).unwrap_or(0);
        stacks.entry(index).or_default().push((colour, bar.cost_micros.max(0)));
    }
    let top = stacks.values().map(|s| s.iter().map(|(_, c)| c).sum::<i64>()).max().unwrap_or(0).max(1);
    let (width, height, left, bottom) = (720.0_f64, 240.0_f64, 64.0_f64, 24.0_f64);
    let slot = (width - left) / days as f64;
    let mut svg = format!(
        r#"<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-labelledby="chart-title"><title id="chart-title">Cost per day by model</title>"#
    );
    svg.push_str(&format!(
        r##"<line x1="{left}" y1="{y}" x2="{width}" y2="{y}" stroke="#999"/><text x="{x}" y="12" font-size="11" text-anchor="end">{}</text><text x="{x}" y="{y}" font-size="11" text-anchor="end">$0</text>"##,
        escape(&money(top)),
        y = height - bottom,
        x = left - 4.0,
    ));
    for (index, stack) in &stacks {
        let x = left + slot * *index as f64 + slot * 0.1;
        let mut y = height - bottom;
        for (colour, cost) in stack {
            let h = (height - bottom - 16.0) * (*cost as f64) / (top as f64);
            y -= h;
            svg.push_str(&format!(
                r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{}"><title>{}</title></rect>"#,
                COLOURS[colour % COLOURS.len()],
                escape(&format!("{} {}: {}", page::date(first + *index as i64 * DAY), models[*colour], money(*cost))),
                w = slot * 0.8,
            ));
        }
    }
    let label_every = days.div_ceil(8).max(1);
    for index in (0..days).step_by(label_every) {
        let x = left + slot * index as f64 + slot / 2.0;
        svg.push_str(&format!(
            r#"<text x="{x:.1}" y="{}" font-size="10" text-anchor="middle">{}</text>"#,
            height - 6.0,
            escape(&page::date(first + index as i64 * DAY)[5..]),
        ));
    }
    svg.push_str("</svg>");
    html! {
        figure.chart {
            (page::svg(svg))
            figcaption {
                ul.legend {
                    @for (i, model) in models.iter().enumerate() {
                        li { span.swatch data-colour=(COLOURS[i % COLOURS.len()]) { (swatch(COLOURS[i % COLOURS.len()])) } " " (model) }
                    }
                }
            }
        }
    }
}

fn swatch(colour: &str) -> Markup {
    page::svg(format!(
        r#"<svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" fill="{colour}"/></svg>"#
    ))
}

/// `text` safe inside SVG text and attributes.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_stack_per_day_and_names_are_escaped() {
        let day = 1_700_000_000 - 1_700_000_000 % 86_400;
        let bars = vec![
            Bar { day, model: "a<b>".into(), cost_micros: 1_000_000 },
            Bar { day, model: "m2".into(), cost_micros: 3_000_000 },
            Bar { day: day + 86_400, model: "m2".into(), cost_micros: 2_000_000 },
        ];
        let markup = cost_per_day(&bars, day, day + 3 * 86_400).into_string();
        assert_eq!(markup.matches("<rect x=").count(), 3, "{markup}");
        assert!(markup.contains("a&lt;b&gt;") && !markup.contains("a<b>"), "{markup}");
        assert!(markup.contains("$4.00"), "the top of the axis is the largest day: {markup}");
    }
}
