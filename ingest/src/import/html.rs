//! Systrace HTML containers: the ftrace text inside.
//!
//! - Old form (catapult `android_systrace.html`): `var linuxPerfData = "\` then the trace as
//!   one JavaScript string, every line ending `\n\`.
//! - New form: `<script class="trace-data" type="application/text">` blocks; the ftrace one
//!   starts with `# tracer:`, others may hold Chrome JSON (skipped).

/// The ftrace text of a systrace HTML page, or `None` when it has none.
pub(super) fn extract(html: &str) -> Option<String> {
    // `var linuxPerfData = "...`: the name also appears in the viewer's code.
    let mut from = 0;
    while let Some(i) = html[from..].find("linuxPerfData") {
        let after = &html[from + i + "linuxPerfData".len()..];
        from += i + 1;
        let Some(value) = after.trim_start().strip_prefix('=') else {
            continue;
        };
        if let Some(lit) = value.trim_start().strip_prefix('"') {
            if let Some(text) = unescape_js(lit) {
                return Some(text);
            }
        }
    }
    let mut out = String::new();
    let mut rest = html;
    while let Some(i) = rest.find("<script") {
        let tag_end = i + rest[i..].find('>')?;
        let tag = &rest[i..tag_end];
        let body_start = tag_end + 1;
        let body_end = body_start + rest[body_start..].find("</script>")?;
        if tag.contains("trace-data") {
            let body = rest[body_start..body_end].trim_start();
            if !(body.starts_with('{') || body.starts_with('[')) {
                out.push_str(body);
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
        rest = &rest[body_end..];
    }
    (!out.is_empty()).then_some(out)
}

/// The value of a double-quoted JavaScript string literal starting at `s` (just after the
/// opening quote), up to the closing quote. `None` when it does not end.
fn unescape_js(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => {}
                '\n' => {}
                '\r' => {
                    // `\` CR LF: a line continuation too.
                    let mut peek = chars.clone();
                    if peek.next() == Some('\n') {
                        chars = peek;
                    }
                }
                'x' => {
                    let h: String = chars.by_ref().take(2).collect();
                    out.push(char::from_u32(u32::from_str_radix(&h, 16).ok()?)?);
                }
                'u' => {
                    let h: String = chars.by_ref().take(4).collect();
                    out.push(
                        char::from_u32(u32::from_str_radix(&h, 16).ok()?).unwrap_or('\u{fffd}'),
                    );
                }
                other => out.push(other),
            },
            other => out.push(other),
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn old_js_string_form() {
        let html = "<script>\n  var linuxPerfData = \"\\\n# tracer: nop\\n\\\n  a-1 [000] 1.0: x: \\\"q\\\"\\n\\\n\";\n</script>";
        assert_eq!(
            extract(html).unwrap(),
            "# tracer: nop\n  a-1 [000] 1.0: x: \"q\"\n"
        );
    }

    #[test]
    fn trace_data_blocks() {
        let html = "<html><script>var x = 1;</script>\
            <script class=\"trace-data\" type=\"application/text\">\n# tracer: nop\na-1 [000] 1.0: x: y\n  </script>\
            <script class=\"trace-data\" type=\"application/text\">{\"traceEvents\": []}</script></html>";
        assert_eq!(
            extract(html).unwrap(),
            "# tracer: nop\na-1 [000] 1.0: x: y\n  \n"
        );
        assert_eq!(extract("<html><body>nothing</body></html>"), None);
    }
}
