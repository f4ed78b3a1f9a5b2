//! The four designs by the one name each has in every command: `format
//! --design`, `sim --design`, and the `design` that `stats` and `check`
//! report. The older spellings (`format --mode/--layout`, `sim
//! --mode/--ftl`) stay as the finer-grained choices they were.

/// One design: its name and what it means to `format` and to `sim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DesignName {
    /// The name: `azor`, `flashtier`, `oodt`, `tica`.
    pub name: &'static str,
    /// What it is, for help texts and errors.
    pub what: &'static str,
    /// `format --mode` and `--layout` of this design.
    pub format_mode: &'static str,
    pub format_layout: &'static str,
    /// `sim --mode` and `--ftl` (None: the mode's default) of this design.
    pub sim_mode: &'static str,
    pub sim_ftl: Option<&'static str>,
}

/// Every design, in the order the docs list them.
pub const DESIGNS: [DesignName; 4] = [
    DesignName {
        name: "azor",
        what: "the SSD cache (Azor)",
        format_mode: "cache",
        format_layout: "in-place",
        sim_mode: "cache",
        sim_ftl: None,
    },
    DesignName {
        name: "flashtier",
        what: "the log-structured cache (FlashTier)",
        format_mode: "cache",
        format_layout: "log-structured",
        sim_mode: "ssc",
        sim_ftl: Some("log"),
    },
    DesignName {
        name: "oodt",
        what: "the tiered volume (OODT)",
        format_mode: "tier",
        format_layout: "in-place",
        sim_mode: "tier",
        sim_ftl: None,
    },
    DesignName {
        name: "tica",
        what: "the three-level cache (TICA)",
        format_mode: "tica",
        format_layout: "in-place",
        sim_mode: "tica",
        sim_ftl: None,
    },
];

/// The design called `name`, or an error listing the names.
pub fn design(name: &str) -> Result<&'static DesignName, String> {
    DESIGNS
        .iter()
        .find(|d| d.name == name.trim())
        .ok_or_else(|| {
            let all: Vec<String> = DESIGNS
                .iter()
                .map(|d| format!("{}: {}", d.name, d.what))
                .collect();
            format!("unknown design '{name}' (allowed: {})", all.join("; "))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_unknown_names_list_them() {
        for d in DESIGNS {
            assert_eq!(design(d.name), Ok(&d));
        }
        let e = design("bcache").unwrap_err();
        for d in DESIGNS {
            assert!(e.contains(d.name), "{e}");
        }
    }
}
