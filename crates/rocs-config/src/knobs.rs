//! Knob tables that remember where each value was written.
//!
//! Knobs are the controller's settings (`rocs_core`'s `Knobs`). rocsd.toml gives defaults
//! and each policy overrides some of them; the two are merged key by key and only then
//! turned into the controller's type. Every value keeps the file, line and column it came
//! from, so that a value the controller refuses is reported where it was written, whichever
//! file that was. The table is generic over the knobs type so that this crate checks
//! policies against exactly the type the controller reads.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::{ConfigError, Location};

/// One knob as written: its value and where.
#[derive(Clone, Debug, PartialEq)]
pub struct KnobEntry {
    pub value: toml::Value,
    pub at: Location,
}

/// Knob values by name, each with its origin; `header` is where the `[knobs]` table began
/// (used for errors that concern the table as a whole).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KnobTable {
    entries: BTreeMap<String, KnobEntry>,
    header: Option<Location>,
}

/// The shape used to read a `[knobs]` table with the place of every key.
pub(crate) type SpannedKnobs = BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>;

impl KnobTable {
    /// An empty table (every knob at the controller's default).
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn from_spanned(
        file: &Path,
        text: &str,
        header: Option<std::ops::Range<usize>>,
        raw: SpannedKnobs,
    ) -> Self {
        let entries = raw
            .into_iter()
            .map(|(k, v)| {
                let at = Location::of_span(file, text, Some(k.span()));
                (
                    k.into_inner(),
                    KnobEntry {
                        value: v.into_inner(),
                        at,
                    },
                )
            })
            .collect();
        KnobTable {
            entries,
            header: header.map(|h| Location::of_span(file, text, Some(h))),
        }
    }

    /// Read a table from TOML text on its own (the text is a `[knobs]` table's body).
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfigError> {
        let raw: SpannedKnobs =
            toml::from_str(text).map_err(|e| ConfigError::from_toml(file, text, &e))?;
        Ok(Self::from_spanned(file, text, Some(0..0), raw))
    }

    /// This table with `over`'s values replacing its own where both set a knob.
    pub fn overlay(&self, over: &KnobTable) -> KnobTable {
        let mut entries = self.entries.clone();
        for (k, v) in &over.entries {
            entries.insert(k.clone(), v.clone());
        }
        KnobTable {
            entries,
            header: over.header.clone().or_else(|| self.header.clone()),
        }
    }

    pub fn get(&self, key: &str) -> Option<&KnobEntry> {
        self.entries.get(key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The values alone, as a TOML table.
    pub fn to_table(&self) -> toml::Table {
        self.entries
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect()
    }

    /// Turn the table into the knobs type `K`. When `K` refuses the table, the error is
    /// placed at the key at fault: each key is tried on its own, and the first one that
    /// `K` refuses for a reason other than a missing field is blamed.
    pub fn resolve<K: DeserializeOwned>(&self) -> Result<K, ConfigError> {
        let whole = K::deserialize(toml::Value::Table(self.to_table()));
        let err = match whole {
            Ok(k) => return Ok(k),
            Err(e) => e,
        };
        for (key, entry) in &self.entries {
            let mut alone = toml::Table::new();
            alone.insert(key.clone(), entry.value.clone());
            if let Err(e) = K::deserialize(toml::Value::Table(alone)) {
                let msg = e.message().trim().to_string();
                if !msg.starts_with("missing field") {
                    return Err(ConfigError::at(
                        entry.at.clone(),
                        format!("knob `{key}`: {msg}"),
                    ));
                }
            }
        }
        Err(self.table_error(format!("knobs: {}", err.message().trim())))
    }

    /// Run a semantic check of the resolved knobs (e.g. `Knobs::validate(colours)`); its
    /// error is placed at the knob it names, or at the table when it names none.
    pub fn check<K, E: Display>(
        &self,
        knobs: &K,
        validate: impl FnOnce(&K) -> Result<(), E>,
    ) -> Result<(), ConfigError> {
        let e = match validate(knobs) {
            Ok(()) => return Ok(()),
            Err(e) => e.to_string(),
        };
        // The longest knob name that the message mentions is the one it is about
        // (`sample_period` rather than `period`).
        let named = self
            .entries
            .iter()
            .filter(|(k, _)| mentions(&e, k))
            .max_by_key(|(k, _)| k.len());
        match named {
            Some((_, entry)) => Err(ConfigError::at(entry.at.clone(), e)),
            None => Err(self.table_error(e)),
        }
    }

    fn table_error(&self, message: String) -> ConfigError {
        match &self.header {
            Some(at) => ConfigError::at(at.clone(), message),
            None => ConfigError::File {
                file: PathBuf::from("(default knobs)"),
                message,
            },
        }
    }
}

/// Does `message` mention `word` as a whole identifier?
fn mentions(message: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    message.match_indices(word).any(|(i, _)| {
        let before = message[..i].chars().next_back();
        let after = message[i + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// A `[knobs]` table inside a larger document, read with its header's place.
#[derive(Deserialize, Default)]
#[serde(transparent)]
pub(crate) struct RawKnobs(pub Option<toml::Spanned<SpannedKnobs>>);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct TestKnobs {
        pollute_colours: u32,
        sample_period: u64,
        dry_run: bool,
    }

    impl Default for TestKnobs {
        fn default() -> Self {
            TestKnobs {
                pollute_colours: 1,
                sample_period: 10_000,
                dry_run: false,
            }
        }
    }

    fn table(file: &str, text: &str) -> KnobTable {
        KnobTable::parse(Path::new(file), text).unwrap()
    }

    #[test]
    fn policy_values_override_defaults_key_by_key() {
        let defaults = table("rocsd.toml", "pollute_colours = 2\nsample_period = 5000\n");
        let policy = table("p.toml", "sample_period = 20000\n");
        let k: TestKnobs = defaults.overlay(&policy).resolve().unwrap();
        assert_eq!(
            k,
            TestKnobs {
                pollute_colours: 2,
                sample_period: 20000,
                dry_run: false
            }
        );
    }

    #[test]
    fn a_bad_value_is_blamed_where_it_was_written() {
        let defaults = table("rocsd.toml", "pollute_colours = 2\n");
        let policy = table("p.toml", "dry_run = true\n\nsample_period = \"often\"\n");
        let e = defaults
            .overlay(&policy)
            .resolve::<TestKnobs>()
            .unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("p.toml:3:1: knob `sample_period`"), "{s}");

        let policy = table("p.toml", "colors = 3\n");
        let s = defaults
            .overlay(&policy)
            .resolve::<TestKnobs>()
            .unwrap_err()
            .to_string();
        assert!(s.starts_with("p.toml:1:1:") && s.contains("colors"), "{s}");
    }

    #[test]
    fn semantic_errors_point_at_the_knob_they_name() {
        let defaults = table("rocsd.toml", "pollute_colours = 9\n");
        let policy = table("p.toml", "dry_run = true\n");
        let merged = defaults.overlay(&policy);
        let k: TestKnobs = merged.resolve().unwrap();
        let e = merged
            .check(&k, |k| {
                if k.pollute_colours > 4 {
                    Err(format!(
                        "pollute_colours = {} is more than the 4 colours",
                        k.pollute_colours
                    ))
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert!(
            e.to_string().starts_with("rocsd.toml:1:1: pollute_colours"),
            "{e}"
        );
    }

    #[test]
    fn mentions_whole_identifiers_only() {
        assert!(mentions("bad sample_period: 0", "sample_period"));
        assert!(!mentions("bad sample_period: 0", "period"));
    }
}
