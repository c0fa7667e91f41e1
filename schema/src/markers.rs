//! The `argus:*` marker protocol, once: text an application (or the collector's uprobes)
//! writes to the recording's `trace_marker`, which the trace carries as a marker event
//! ([`crate::EventKind::Marker`]) and the stages act on.
//!
//! | marker | written by | meaning |
//! |---|---|---|
//! | `argus:dispatch-begin NAME` … `argus:dispatch-end NAME` | the application, or `argus record --dispatch` uprobes | one callback of a user-space dispatch loop: a callout segment of its own (pipeline rules) |
//! | `argus:call-begin NAME` … `argus:call-end NAME` | `argus record --probe` uprobes | one call of a function (counted by `argus dig`; no segment of its own) |
//! | `argus:enqueue NAME` | `argus record --enqueue` uprobes | a work item queued for a dispatch: with the item the probe fetched (a record field, not text), a `work_queue` event |
//! | `argus:hang-begin [tid=N]` … `argus:hang-end [tid=N]` | the application | the hang to diagnose (diagnose) |
//! | `argus:flag-set NAME` | the application | a data flag another thread polls was set (diagnose, RepeatedYield) |
//! | `argus:input …` | the application | input that started a long run (diagnose, LongRunning) |
//!
//! ```
//! use argus_schema::markers::{Marker, parse};
//! assert_eq!(parse("argus:dispatch-begin on_job"), Some(Marker::DispatchBegin("on_job")));
//! assert_eq!(parse("argus:hang-end tid=7"), Some(Marker::HangEnd("tid=7")));
//! assert_eq!(parse("hello"), None);
//! ```

/// Starts a dispatch callout named by the rest of the text.
pub const DISPATCH_BEGIN: &str = "argus:dispatch-begin";
/// Ends the innermost dispatch callout of the same name.
pub const DISPATCH_END: &str = "argus:dispatch-end";
/// A work item was queued by the function named after it (`argus record --enqueue`; the
/// item travels in the probe's record, see [`dispatch_id`]).
pub const ENQUEUE: &str = "argus:enqueue";
/// A probed function was entered (followed by its name).
pub const CALL_BEGIN: &str = "argus:call-begin";
/// A probed function returned (followed by its name).
pub const CALL_END: &str = "argus:call-end";
/// The application says its hang begins (optionally `tid=N`).
pub const HANG_BEGIN: &str = "argus:hang-begin";
/// The application says its hang ended (optionally `tid=N`).
pub const HANG_END: &str = "argus:hang-end";
/// A data flag was set (followed by its name).
pub const FLAG_SET: &str = "argus:flag-set";
/// Input arrived that starts work (free text after it).
pub const INPUT: &str = "argus:input";

/// The `function` id of a user-space dispatch or enqueue named `name` (a dispatch
/// callout's work-item segment, and the `function` of the `work_start`/`work_queue` events
/// the collector's item-fetching probes become): the name (trimmed) hashed with FNV-1a, so
/// callouts of different functions differ and a begin matches its end.
pub fn dispatch_id(name: &str) -> u64 {
    crate::hash::fnv1a(name.trim().as_bytes())
}

/// A marker of the protocol, with the text after its keyword (trimmed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker<'a> {
    /// [`DISPATCH_BEGIN`] and the callout's name.
    DispatchBegin(&'a str),
    /// [`DISPATCH_END`] and the callout's name.
    DispatchEnd(&'a str),
    /// [`ENQUEUE`] and the queuing function's name.
    Enqueue(&'a str),
    /// [`CALL_BEGIN`] and the function's name.
    CallBegin(&'a str),
    /// [`CALL_END`] and the function's name.
    CallEnd(&'a str),
    /// [`HANG_BEGIN`] and its arguments.
    HangBegin(&'a str),
    /// [`HANG_END`] and its arguments.
    HangEnd(&'a str),
    /// [`FLAG_SET`] and the flag's name.
    FlagSet(&'a str),
    /// [`INPUT`] and its text.
    Input(&'a str),
}

/// The marker `text` is, or `None` for text outside the protocol. A keyword must end at
/// the end of the text or at whitespace (`argus:inputs` is not [`INPUT`]).
pub fn parse(text: &str) -> Option<Marker<'_>> {
    let (word, rest) = match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    };
    Some(match word {
        DISPATCH_BEGIN => Marker::DispatchBegin(rest),
        DISPATCH_END => Marker::DispatchEnd(rest),
        ENQUEUE => Marker::Enqueue(rest),
        CALL_BEGIN => Marker::CallBegin(rest),
        CALL_END => Marker::CallEnd(rest),
        HANG_BEGIN => Marker::HangBegin(rest),
        HANG_END => Marker::HangEnd(rest),
        FLAG_SET => Marker::FlagSet(rest),
        INPUT => Marker::Input(rest),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_keyword_and_its_argument() {
        assert_eq!(
            parse("argus:dispatch-end  a::b "),
            Some(Marker::DispatchEnd("a::b"))
        );
        assert_eq!(parse("argus:hang-begin"), Some(Marker::HangBegin("")));
        assert_eq!(
            parse("argus:flag-set ready"),
            Some(Marker::FlagSet("ready"))
        );
        assert_eq!(parse("argus:input\tGET /"), Some(Marker::Input("GET /")));
        assert_eq!(parse("argus:enqueue q"), Some(Marker::Enqueue("q")));
        assert_eq!(parse("argus:inputs"), None);
        assert_eq!(parse("argus:q"), None);
        assert_eq!(parse(""), None);
    }
}
