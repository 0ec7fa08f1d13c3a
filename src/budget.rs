//! Token and cost accounting with hard budgets.
//!
//! Usage comes from the providers' own usage fields (see
//! [`crate::llm::Usage`]); cost is usage times the model's price
//! ([`Prices`], USD per million tokens: configured `[prices."model"]`
//! entries first, then the built-in defaults by longest name prefix; a model
//! found in neither — every local model — costs 0).
//!
//! Budgets (`[budget]`: tokens and USD per turn, per session, per day) are
//! checked *before* a request is sent: the request's input is estimated at
//! one token per four characters of its JSON (no tokenizer: they differ per
//! model and are heavy; chars/4 is the usual rule and errs high for code),
//! and a request whose estimate would take any total past its limit is not
//! sent. The answer's own output is counted when it arrives, so a budget can
//! be overshot by at most one answer's output tokens.
//!
//! Day totals live in `<state>/usage/<YYYY-MM-DD>.jsonl` (one line per
//! request, UTC days) and are re-read before each check, so several daemons
//! share one daily budget.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use serde::{Deserialize, Serialize};

use crate::llm::{ChatRequest, Usage};

/// The currency of every price and cost.
pub const CURRENCY: &str = "USD";

/// `[budget]` in config.toml: every limit optional (absent: no limit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "snake_case")]
pub struct BudgetConfig {
    pub turn_tokens: Option<u64>,
    pub session_tokens: Option<u64>,
    pub day_tokens: Option<u64>,
    pub turn_cost: Option<f64>,
    pub session_cost: Option<f64>,
    pub day_cost: Option<f64>,
}

impl BudgetConfig {
    pub fn is_empty(&self) -> bool {
        *self == BudgetConfig::default()
    }

    /// Apply a change: a field present in `patch` replaces ours (`0`
    /// removes the limit).
    pub fn merge(&mut self, patch: &BudgetPatch) {
        fn set<T: PartialEq + Default + Copy>(slot: &mut Option<T>, v: Option<T>) {
            if let Some(v) = v {
                *slot = if v == T::default() { None } else { Some(v) };
            }
        }
        set(&mut self.turn_tokens, patch.turn_tokens);
        set(&mut self.session_tokens, patch.session_tokens);
        set(&mut self.day_tokens, patch.day_tokens);
        set(&mut self.turn_cost, patch.turn_cost);
        set(&mut self.session_cost, patch.session_cost);
        set(&mut self.day_cost, patch.day_cost);
    }
}

/// `_passepartout/budget/set` parameters (camelCase on the wire).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct BudgetPatch {
    pub turn_tokens: Option<u64>,
    pub session_tokens: Option<u64>,
    pub day_tokens: Option<u64>,
    pub turn_cost: Option<f64>,
    pub session_cost: Option<f64>,
    pub day_cost: Option<f64>,
}

impl From<&BudgetConfig> for BudgetPatch {
    fn from(b: &BudgetConfig) -> Self {
        BudgetPatch {
            turn_tokens: b.turn_tokens,
            session_tokens: b.session_tokens,
            day_tokens: b.day_tokens,
            turn_cost: b.turn_cost,
            session_cost: b.session_cost,
            day_cost: b.day_cost,
        }
    }
}

/// A model's price in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cached input tokens read back (default: the input price).
    #[serde(default)]
    pub cached_input: Option<f64>,
}

/// Approximate list prices (USD per million tokens: input, output, cached
/// input), as published by the vendors in 2025. Dated and approximate:
/// configure `[prices."model"]` for billing you rely on. Matched by longest
/// prefix of the model name.
const DEFAULT_PRICES: &[(&str, f64, f64, f64)] = &[
    ("claude-opus-4-5", 5.0, 25.0, 0.5),
    ("claude-opus-4", 15.0, 75.0, 1.5),
    ("claude-3-opus", 15.0, 75.0, 1.5),
    ("claude-sonnet-4", 3.0, 15.0, 0.3),
    ("claude-3-7-sonnet", 3.0, 15.0, 0.3),
    ("claude-3-5-sonnet", 3.0, 15.0, 0.3),
    ("claude-haiku-4-5", 1.0, 5.0, 0.1),
    ("claude-3-5-haiku", 0.8, 4.0, 0.08),
    ("claude-3-haiku", 0.25, 1.25, 0.03),
    ("gpt-4o-mini", 0.15, 0.6, 0.075),
    ("gpt-4o", 2.5, 10.0, 1.25),
    ("gpt-4.1-nano", 0.1, 0.4, 0.025),
    ("gpt-4.1-mini", 0.4, 1.6, 0.1),
    ("gpt-4.1", 2.0, 8.0, 0.5),
    ("gpt-5-nano", 0.05, 0.4, 0.005),
    ("gpt-5-mini", 0.25, 2.0, 0.025),
    ("gpt-5", 1.25, 10.0, 0.125),
    ("o1-mini", 1.1, 4.4, 0.55),
    ("o1", 15.0, 60.0, 7.5),
    ("o3-mini", 1.1, 4.4, 0.55),
    ("o3", 2.0, 8.0, 0.5),
    ("o4-mini", 1.1, 4.4, 0.275),
    ("deepseek-chat", 0.27, 1.1, 0.07),
    ("deepseek-reasoner", 0.55, 2.19, 0.14),
];

/// Anthropic bills writing a prompt cache entry at 1.25× the input price.
const CACHE_WRITE_FACTOR: f64 = 1.25;

/// The price table: configured prices, then the defaults.
#[derive(Debug, Clone, Default)]
pub struct Prices {
    configured: BTreeMap<String, Price>,
}

impl Prices {
    pub fn new(configured: BTreeMap<String, Price>) -> Self {
        Prices { configured }
    }

    /// The price of `model`; `None` for models we know no price of (local
    /// ones), which then cost 0.
    pub fn price(&self, model: &str) -> Option<Price> {
        if let Some(p) = self.configured.get(model) {
            return Some(*p);
        }
        DEFAULT_PRICES
            .iter()
            .filter(|(prefix, ..)| model.starts_with(prefix))
            .max_by_key(|(prefix, ..)| prefix.len())
            .map(|&(_, input, output, cached)| Price {
                input,
                output,
                cached_input: Some(cached),
            })
    }

    /// What `usage` cost on `model`, in USD.
    pub fn cost(&self, model: &str, usage: &Usage) -> f64 {
        let Some(p) = self.price(model) else {
            return 0.0;
        };
        let cached = usage.cache_read_tokens.min(usage.input_tokens);
        let written = usage
            .cache_write_tokens
            .min(usage.input_tokens.saturating_sub(cached));
        let plain = usage.input_tokens - cached - written;
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(plain, p.input)
            + per(cached, p.cached_input.unwrap_or(p.input))
            + per(written, p.input * CACHE_WRITE_FACTOR)
            + per(usage.output_tokens, p.output)
    }

    /// The cost of sending `tokens` input tokens to `model`, uncached.
    pub fn input_cost(&self, model: &str, tokens: u64) -> f64 {
        self.price(model)
            .map_or(0.0, |p| tokens as f64 * p.input / 1_000_000.0)
    }
}

/// The input tokens of `request`, estimated at one token per four
/// characters of the messages and tool specs (plus a few per message for
/// the wire format's framing).
pub fn estimate_tokens(request: &ChatRequest) -> u64 {
    let mut chars = 0usize;
    let mut images = 0u64;
    for m in &request.messages {
        chars += m.content.len() + 16;
        images += m.images.len() as u64;
        for c in &m.tool_calls {
            chars += c.name.len() + c.id.len() + c.arguments.to_string().len();
        }
    }
    for t in &request.tools {
        chars += t.name.len() + t.description.len() + t.parameters.to_string().len() + 16;
    }
    chars.div_ceil(4) as u64 + images * crate::llm::image::IMAGE_TOKENS
}

/// Tokens (input + output) and cost spent in one scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spent {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    pub cost: f64,
}

impl Spent {
    pub fn add(&mut self, usage: &Usage, cost: f64) {
        self.input_tokens += usage.input_tokens;
        self.output_tokens += usage.output_tokens;
        self.cached_tokens += usage.cache_read_tokens;
        self.cost += cost;
    }

    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    pub fn from_usage(usage: &Usage, cost: f64) -> Spent {
        let mut s = Spent::default();
        s.add(usage, cost);
        s
    }
}

/// Which budget a request would break, and by how much.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeded {
    /// `turn`, `session` or `day`.
    pub scope: &'static str,
    /// The config key, e.g. `session_tokens`.
    pub key: String,
    pub limit: f64,
    pub spent: f64,
    pub needed: f64,
    pub tokens: bool,
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let amount = |v: f64| {
            if self.tokens {
                format!("{} tokens", v as u64)
            } else {
                format!("{v:.4} {CURRENCY}")
            }
        };
        let camel = camel_case(&self.key);
        write!(
            f,
            "Budget reached: the next request (about {}) would take this {}'s spending from {} past its limit of {}, so it was not sent. \
To raise the limit, set `{}` under `[budget]` in {} (0 removes it), \
or for this daemon call `_passepartout/budget/set` with {{\"{}\": N}}; then ask again.",
            amount(self.needed),
            self.scope,
            amount(self.spent),
            amount(self.limit),
            self.key,
            crate::paths::config_file_shown(),
            camel
        )
    }
}

fn camel_case(key: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The budgets, prices and the day's ledger of one daemon.
#[derive(Debug)]
pub struct Accounts {
    budget: RwLock<BudgetConfig>,
    pub prices: Prices,
    /// `<state>/usage`; `None` keeps day totals in memory only.
    ledger_dir: Option<PathBuf>,
    /// Day totals when there is no ledger directory.
    memory_day: Mutex<(String, Spent)>,
    /// The last reading of today's ledger: (day, file length, totals). The
    /// file is read again only when its length changed behind our back (an
    /// other daemon wrote to it), so a check costs a `stat`, not a parse of
    /// the whole day.
    cached_day: Mutex<(String, u64, Spent)>,
}

/// Most bytes of a day's ledger read back (a day of heavy use is far less).
const LEDGER_READ_LIMIT: u64 = 16 * 1024 * 1024;

#[derive(Serialize, Deserialize)]
struct LedgerLine {
    at: String,
    session: String,
    model: String,
    usage: Usage,
    cost: f64,
}

impl Accounts {
    pub fn new(budget: BudgetConfig, prices: Prices, ledger_dir: Option<PathBuf>) -> Accounts {
        Accounts {
            budget: RwLock::new(budget),
            prices,
            ledger_dir,
            memory_day: Mutex::new((String::new(), Spent::default())),
            cached_day: Mutex::new((String::new(), 0, Spent::default())),
        }
    }

    /// The uncached input cost of `tokens` on `model`.
    pub fn input_cost(&self, model: &str, tokens: u64) -> f64 {
        self.prices.input_cost(model, tokens)
    }

    pub fn budget(&self) -> BudgetConfig {
        self.budget
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn set_budget(&self, patch: &BudgetPatch) -> BudgetConfig {
        let mut b = self
            .budget
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        b.merge(patch);
        b.clone()
    }

    fn today() -> String {
        crate::util::time::day(std::time::SystemTime::now())
    }

    fn ledger_path(&self, day: &str) -> Option<PathBuf> {
        self.ledger_dir
            .as_ref()
            .map(|d| d.join(format!("{day}.jsonl")))
    }

    /// Today's totals (all daemons sharing the state directory). Blocking
    /// file I/O: call from `spawn_blocking`.
    pub fn day_spent(&self) -> Spent {
        let day = Self::today();
        match self.ledger_path(&day) {
            Some(path) => {
                let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                let mut cache = self
                    .cached_day
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if cache.0 != day || cache.1 != len {
                    *cache = (day, len, read_ledger(&path));
                }
                cache.2
            }
            None => {
                let m = self
                    .memory_day
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if m.0 == day {
                    m.1
                } else {
                    Spent::default()
                }
            }
        }
    }

    /// Add one request to today's ledger. Blocking file I/O.
    pub fn record(&self, session: &str, model: &str, usage: &Usage, cost: f64) {
        let day = Self::today();
        let Some(path) = self.ledger_path(&day) else {
            let mut m = self
                .memory_day
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if m.0 != day {
                *m = (day, Spent::default());
            }
            m.1.add(usage, cost);
            return;
        };
        let line = LedgerLine {
            at: crate::util::time::rfc3339(std::time::SystemTime::now()),
            session: session.into(),
            model: model.into(),
            usage: *usage,
            cost,
        };
        let result = (|| -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut text = serde_json::to_string(&line).map_err(std::io::Error::other)?;
            text.push('\n');
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&path)?;
            let before = file.metadata()?.len();
            file.write_all(text.as_bytes())?;
            // Our own line: keep the cached totals current without a
            // re-read, when the cache was current before it.
            let mut cache = self
                .cached_day
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if cache.0 == day && cache.1 == before {
                cache.1 = before + text.len() as u64;
                cache.2.add(usage, cost);
            }
            Ok(())
        })();
        if let Err(e) = result {
            tracing::error!("usage ledger {}: {e}", path.display());
        }
    }

    /// Refuse a request of about `tokens` input tokens costing `cost` when
    /// it would take a total past its limit.
    pub fn check(
        &self,
        turn: &Spent,
        session: &Spent,
        day: &Spent,
        tokens: u64,
        cost: f64,
    ) -> Result<(), Exceeded> {
        let b = self.budget();
        let scopes = [
            ("turn", turn, b.turn_tokens, b.turn_cost),
            ("session", session, b.session_tokens, b.session_cost),
            ("day", day, b.day_tokens, b.day_cost),
        ];
        for (scope, spent, token_limit, cost_limit) in scopes {
            if let Some(limit) = token_limit {
                if spent.tokens() + tokens > limit {
                    return Err(Exceeded {
                        scope,
                        key: format!("{scope}_tokens"),
                        limit: limit as f64,
                        spent: spent.tokens() as f64,
                        needed: tokens as f64,
                        tokens: true,
                    });
                }
            }
            if let Some(limit) = cost_limit {
                if spent.cost + cost > limit {
                    return Err(Exceeded {
                        scope,
                        key: format!("{scope}_cost"),
                        limit,
                        spent: spent.cost,
                        needed: cost,
                        tokens: false,
                    });
                }
            }
        }
        Ok(())
    }

    /// The limits and what remains of each, for `_passepartout/usage`.
    pub fn budget_report(
        &self,
        turn: &Spent,
        session: &Spent,
        day: &Spent,
    ) -> Option<serde_json::Value> {
        let b = self.budget();
        if b.is_empty() {
            return None;
        }
        let left_tokens =
            |limit: Option<u64>, s: &Spent| limit.map(|l| l.saturating_sub(s.tokens()));
        let left_cost = |limit: Option<f64>, s: &Spent| limit.map(|l| (l - s.cost).max(0.0));
        Some(serde_json::json!({
            "turnTokens": b.turn_tokens, "sessionTokens": b.session_tokens, "dayTokens": b.day_tokens,
            "turnCost": b.turn_cost, "sessionCost": b.session_cost, "dayCost": b.day_cost,
            "remaining": {
                "turnTokens": left_tokens(b.turn_tokens, turn),
                "sessionTokens": left_tokens(b.session_tokens, session),
                "dayTokens": left_tokens(b.day_tokens, day),
                "turnCost": left_cost(b.turn_cost, turn),
                "sessionCost": left_cost(b.session_cost, session),
                "dayCost": left_cost(b.day_cost, day),
            }
        }))
    }
}

fn read_ledger(path: &Path) -> Spent {
    let mut total = Spent::default();
    let Ok(file) = std::fs::File::open(path) else {
        return total;
    };
    let reader = std::io::BufReader::new(std::io::Read::take(file, LEDGER_READ_LIMIT));
    for line in reader.lines().map_while(Result::ok) {
        // A torn or foreign line is skipped: the ledger is advisory totals.
        if let Ok(l) = serde_json::from_str::<LedgerLine>(&line) {
            total.add(&l.usage, l.cost);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, cached: u64, written: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cached,
            cache_write_tokens: written,
        }
    }

    #[test]
    fn prices_match_the_longest_prefix_and_local_models_are_free() {
        let p = Prices::default();
        assert_eq!(p.price("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(p.price("gpt-4o-2024-08-06").unwrap().input, 2.5);
        assert_eq!(p.price("claude-opus-4-5-20251101").unwrap().input, 5.0);
        assert_eq!(p.price("claude-opus-4-1").unwrap().input, 15.0);
        assert!(p.price("llama3.2").is_none());
        assert_eq!(p.cost("llama3.2", &usage(1_000_000, 1_000_000, 0, 0)), 0.0);
        let mut configured = BTreeMap::new();
        configured.insert(
            "llama3.2".to_string(),
            Price {
                input: 1.0,
                output: 2.0,
                cached_input: None,
            },
        );
        let p = Prices::new(configured);
        assert_eq!(p.cost("llama3.2", &usage(1_000_000, 500_000, 0, 0)), 2.0);
    }

    #[test]
    fn cached_tokens_are_billed_at_the_cached_price() {
        let p = Prices::default();
        // claude-sonnet-4: 3 in, 15 out, 0.3 cached, writes at 3.75.
        let c = p.cost("claude-sonnet-4-5", &usage(1_000_000, 0, 600_000, 200_000));
        let expected = 0.2 * 3.0 + 0.6 * 0.3 + 0.2 * 3.75;
        assert!((c - expected).abs() < 1e-9, "{c} vs {expected}");
    }

    #[test]
    fn a_request_past_a_limit_is_refused_with_the_way_to_raise_it() {
        let a = Accounts::new(
            BudgetConfig {
                session_tokens: Some(100),
                ..BudgetConfig::default()
            },
            Prices::default(),
            None,
        );
        let spent = Spent {
            input_tokens: 60,
            output_tokens: 20,
            ..Spent::default()
        };
        let none = Spent::default();
        assert!(a.check(&none, &spent, &spent, 20, 0.0).is_ok());
        let e = a.check(&none, &spent, &spent, 21, 0.0).unwrap_err();
        assert_eq!(e.scope, "session");
        let text = e.to_string();
        assert!(text.contains("`session_tokens` under `[budget]`"), "{text}");
        assert!(text.contains("\"sessionTokens\": N"), "{text}");
        a.set_budget(&BudgetPatch {
            session_tokens: Some(0),
            ..BudgetPatch::default()
        });
        assert!(a.check(&none, &spent, &spent, 10_000, 0.0).is_ok());
    }

    #[test]
    fn the_day_ledger_is_shared_through_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let a = Accounts::new(
            BudgetConfig::default(),
            Prices::default(),
            Some(tmp.path().into()),
        );
        let b = Accounts::new(
            BudgetConfig::default(),
            Prices::default(),
            Some(tmp.path().into()),
        );
        a.record("s1", "m", &usage(10, 5, 0, 0), 0.25);
        b.record("s2", "m", &usage(1, 1, 0, 0), 0.25);
        let day = a.day_spent();
        assert_eq!(day.tokens(), 17);
        assert_eq!(day.cost, 0.5);
    }
}
