//! The daemon's config file (TOML).
//!
//! ```toml
//! [tunables]
//! arc_max = "2G"          # bytes, or a size string
//! dirty_data_max = 536870912
//! txg_timeout = 5         # seconds
//! ```
//!
//! Unknown tables or keys are an error, so a typo never passes silently.

use tarn_obj::Tunables;

pub fn parse_config(text: &str) -> Result<Tunables, String> {
    let value: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_string())?;
    let mut tunables = Tunables::default();
    for (key, item) in &value {
        if key != "tunables" {
            return Err(format!("unknown table or key '{key}' (only [tunables] is recognized)"));
        }
        let table = item.as_table().ok_or("'tunables' must be a table")?;
        for (name, setting) in table {
            let number = match setting {
                toml::Value::Integer(n) if *n >= 0 => *n as u64,
                toml::Value::String(s) => tarn_ds::size::parse_size(s)
                    .ok_or_else(|| format!("tunable '{name}': bad value '{s}'"))?,
                other => return Err(format!("tunable '{name}': bad value {other}")),
            };
            match name.as_str() {
                "arc_max" => tunables.arc_max = number,
                "dirty_data_max" => tunables.dirty_data_max = number,
                "txg_timeout" => {
                    if number == 0 {
                        return Err("tunable 'txg_timeout' must be at least 1 second".into());
                    }
                    tunables.txg_timeout_ms = number.saturating_mul(1000)
                }
                other => {
                    return Err(format!(
                        "unknown tunable '{other}' (known: arc_max, dirty_data_max, txg_timeout)"
                    ))
                }
            }
        }
    }
    Ok(tunables)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tunables() {
        let t = parse_config("[tunables]\narc_max = \"2G\"\ndirty_data_max = 1048576\ntxg_timeout = 2\n").unwrap();
        assert_eq!(t.arc_max, 2 << 30);
        assert_eq!(t.dirty_data_max, 1 << 20);
        assert_eq!(t.txg_timeout_ms, 2000);
        assert!(parse_config("").is_ok());
    }

    #[test]
    fn rejects_unknown_keys() {
        assert!(parse_config("[tunables]\narc_maxx = 1\n").unwrap_err().contains("arc_maxx"));
        assert!(parse_config("[other]\n").is_err());
        assert!(parse_config("[tunables]\ntxg_timeout = -1\n").is_err());
        assert!(parse_config("not toml [").is_err());
    }
}
