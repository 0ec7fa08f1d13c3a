//! Timestamps as the daemon writes them everywhere (audit records, plans,
//! sessions, checkpoints, the budget's ledger): RFC 3339 in UTC with
//! milliseconds, `2026-11-22T19:50:14.123Z`. Fixed width, so timestamps
//! compare as strings (checkpoint pruning relies on it). The calendar
//! arithmetic is the `time` crate's.

use std::time::{SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;

/// `time` as a UTC calendar date and time; times before 1970 are the
/// epoch.
pub fn utc(time: SystemTime) -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH + time.duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// `time` as RFC 3339 UTC with milliseconds. Times before 1970 are shown
/// as the epoch.
pub fn rfc3339(time: SystemTime) -> String {
    let at = utc(time);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

/// Now, as [`rfc3339`].
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// The UTC day of `time`, `2026-11-22`.
pub fn day(time: SystemTime) -> String {
    rfc3339(time)[..10].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let at = |s: u64, ms: u64| rfc3339(UNIX_EPOCH + Duration::from_millis(s * 1000 + ms));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(1_795_378_503, 7), "2026-11-22T20:15:03.007Z");
        assert_eq!(at(1_795_377_014, 123), "2026-11-22T19:50:14.123Z");
        // A leap day, and a century that is not a leap year.
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(4_107_542_399, 999), "2100-02-28T23:59:59.999Z");
        // Sub-millisecond parts are cut, not rounded.
        let t = UNIX_EPOCH + Duration::from_nanos(1_999_999);
        assert_eq!(rfc3339(t), "1970-01-01T00:00:00.001Z");
        // Before the epoch: the epoch.
        let before = UNIX_EPOCH - Duration::from_secs(10);
        assert_eq!(rfc3339(before), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn days_are_the_date_part() {
        assert_eq!(
            day(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29"
        );
    }
}
