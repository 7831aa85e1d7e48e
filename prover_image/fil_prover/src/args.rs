//! The command line's `--name value` flags, and the environment variables the commands read.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::fail::{bad_input, Outcome};

/// The flags after the command name: each `--name value`, at most once, from a known set.
pub struct Flags {
    values: BTreeMap<String, String>,
}

impl Flags {
    /// Parses `args` (the words after the command), allowing only the flags in `known`.
    pub fn parse(command: &str, args: &[String], known: &[&str]) -> Outcome<Flags> {
        let mut values = BTreeMap::new();
        let mut words = args.iter();
        while let Some(word) = words.next() {
            let name = word
                .strip_prefix("--")
                .filter(|name| known.contains(name))
                .ok_or_else(|| {
                    bad_input(format!(
                        "{command}: unknown argument {word:?}; {}",
                        usage(known)
                    ))
                })?;
            let value = words
                .next()
                .ok_or_else(|| bad_input(format!("{command}: --{name} needs a value")))?;
            if values.insert(name.to_string(), value.clone()).is_some() {
                return Err(bad_input(format!("{command}: --{name} is given twice")));
            }
        }
        Ok(Flags { values })
    }

    /// The value of `--name`, if given.
    pub fn optional(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The value of `--name`; bad input if it is missing.
    pub fn required(&self, name: &str) -> Outcome<&str> {
        self.optional(name)
            .ok_or_else(|| bad_input(format!("--{name} is required")))
    }

    /// The value of `--name` parsed as a `T` (a decimal number).
    pub fn number<T: FromStr>(&self, name: &str) -> Outcome<T> {
        let text = self.required(name)?;
        text.parse()
            .map_err(|_| bad_input(format!("--{name}: {text:?} is not a decimal number")))
    }
}

fn usage(known: &[&str]) -> String {
    let flags: Vec<String> = known.iter().map(|name| format!("--{name}")).collect();
    format!("expected {}", flags.join(", "))
}

/// The value of environment variable `name`; bad input if it is unset or empty.
pub fn env_required(name: &str) -> Outcome<String> {
    env_optional(name).ok_or_else(|| bad_input(format!("{name} is not set")))
}

/// The value of environment variable `name`, unless it is unset or empty.
pub fn env_optional(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}
