//! TOML device profiles: the shipped default, partial profiles, and errors.

use tiercache_model::{Profile, ProfileError};

#[test]
fn default_toml_file_equals_profile_default() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/default.toml");
    let loaded = Profile::load(path).expect("default.toml loads");
    assert_eq!(loaded, Profile::default());
    assert_eq!(
        Profile::from_toml_str(Profile::DEFAULT_TOML).unwrap(),
        Profile::default()
    );
}

#[test]
fn default_profile_builds_every_model() {
    let p = Profile::default();
    p.hdd_model().unwrap();
    p.ssd_model().unwrap();
    p.dram_model().unwrap();
}

#[test]
fn serialized_profile_parses_back_to_itself() {
    let mut p = Profile::default();
    p.hdd.rpm = 5400.0;
    p.ssd.channels = 4;
    p.dram.latency_ns = 80.0;
    let text = p.to_toml_string();
    assert_eq!(Profile::from_toml_str(&text).unwrap(), p);
}

#[test]
fn missing_keys_take_defaults() {
    let p = Profile::from_toml_str("[hdd]\nrpm = 5400\n[ssd]\nchannels = 4\n").unwrap();
    assert_eq!(p.hdd.rpm, 5400.0);
    assert_eq!(p.ssd.channels, 4);
    let d = Profile::default();
    assert_eq!(p.hdd.avg_seek_ms, d.hdd.avg_seek_ms);
    assert_eq!(p.ssd.page_read_us, d.ssd.page_read_us);
    assert_eq!(p.dram, d.dram);
    assert_eq!(Profile::from_toml_str("").unwrap(), d);
}

fn err(text: &str) -> ProfileError {
    Profile::from_toml_str(text).expect_err("profile must be refused")
}

#[test]
fn unknown_key_is_refused_by_name() {
    let e = err("[hdd]\nrpm = 7200\navg_seek = 8.5\n");
    let msg = e.to_string();
    assert!(matches!(e, ProfileError::Parse(_)), "{e:?}");
    assert!(msg.contains("avg_seek"), "{msg}");
    // The message lists what is allowed.
    assert!(msg.contains("avg_seek_ms"), "{msg}");
}

#[test]
fn unknown_section_is_refused_by_name() {
    let msg = err("[nvme]\nchannels = 8\n").to_string();
    assert!(msg.contains("nvme"), "{msg}");
}

#[test]
fn wrong_type_is_refused() {
    let msg = err("[hdd]\nrpm = \"fast\"\n").to_string();
    assert!(msg.contains("rpm") || msg.contains("line 2"), "{msg}");
}

#[test]
fn malformed_toml_is_refused() {
    assert!(matches!(err("[hdd\nrpm = 1"), ProfileError::Parse(_)));
}

fn invalid_key(text: &str) -> String {
    match err(text) {
        ProfileError::Invalid { key, reason } => {
            assert!(!reason.is_empty());
            key
        }
        other => panic!("expected an out-of-range error, got {other:?}"),
    }
}

#[test]
fn out_of_range_values_name_their_key() {
    assert_eq!(invalid_key("[hdd]\nrpm = 0\n"), "hdd.rpm");
    assert_eq!(
        invalid_key("[hdd]\nread_transfer_mb_s = -5\n"),
        "hdd.read_transfer_mb_s"
    );
    assert_eq!(invalid_key("[hdd]\ncylinders = 1\n"), "hdd.cylinders");
    assert_eq!(
        invalid_key("[hdd]\ncommand_overhead_ms = nan\n"),
        "hdd.command_overhead_ms"
    );
    assert_eq!(invalid_key("[ssd]\nchannels = 0\n"), "ssd.channels");
    assert_eq!(invalid_key("[ssd]\npage_bytes = 0\n"), "ssd.page_bytes");
    assert_eq!(
        invalid_key("[ssd]\nchannel_transfer_mb_s = inf\n"),
        "ssd.channel_transfer_mb_s"
    );
    assert_eq!(
        invalid_key("[dram]\nbandwidth_gb_s = 0\n"),
        "dram.bandwidth_gb_s"
    );
}

#[test]
fn inconsistent_seek_times_are_refused() {
    // Average above the full stroke.
    assert_eq!(
        invalid_key("[hdd]\navg_seek_ms = 25\nfull_stroke_seek_ms = 21\n"),
        "hdd.avg_seek_ms"
    );
    // Average below a straight line from 2 to 21 ms (which averages 8.33 ms):
    // no smooth increasing concave curve fits.
    let e = err("[hdd]\navg_seek_ms = 7.5\n").to_string();
    assert!(e.contains("hdd.avg_seek_ms") && e.contains("8.333"), "{e}");
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let e = Profile::load("/nonexistent/tiercache/profile.toml").unwrap_err();
    assert!(matches!(e, ProfileError::Io { .. }));
    assert!(e
        .to_string()
        .contains("/nonexistent/tiercache/profile.toml"));
}
