use super::*;

#[test]
fn the_line_has_exactly_the_contract_keys() {
    let tally = Tally {
        kills: 60,
        ..Tally::default()
    };
    assert_eq!(
        tally.json(),
        r#"{"kills":60,"committed_rows_lost":0,"torn_rows":0,"panics":0,"open_errors":0}"#
    );
    assert!(tally.clean());
    assert!(
        !Tally {
            torn_rows: 1,
            ..Tally::default()
        }
        .clean()
    );
}

#[test]
fn the_writer_s_lines_are_read_as_announced() {
    let mut heard = Heard::default();
    assert_eq!(note(&mut heard, "creating"), Event::Creating);
    assert_eq!(note(&mut heard, "opened 100 90"), Event::Opened);
    assert_eq!(note(&mut heard, "intent 130"), Event::Other);
    assert_eq!(note(&mut heard, "committed 130 120"), Event::Other);
    assert_eq!(note(&mut heard, "intent 4100 wrap"), Event::Wrap);
    assert!(heard.creating && heard.opened);
    assert_eq!(heard.committed, Some((130, 120)));
    assert_eq!(heard.reached, 4100);
    assert_eq!(note(&mut heard, "garbage"), Event::Other);
}

/// Parses a `crash-test` command line given as words.
fn parse(words: &[&str]) -> Result<Options> {
    let args: Vec<String> = words.iter().map(|s| s.to_string()).collect();
    parse_args(&args)
}

#[test]
fn bad_flags_are_usage_errors() {
    for words in [
        &["--kills"][..],
        &["--kills", "x"],
        &["--kills", "0"],
        &["--runs", "0"],
        &["--runs=-1"],
        &["--seed"],
        &["--fast"],
    ] {
        let err = parse(words).expect_err("must fail");
        assert!(
            err.downcast_ref::<crate::UsageError>().is_some(),
            "{words:?}: {err}"
        );
    }
}

#[test]
fn each_flag_selects_its_part_and_neither_the_memmap_part() -> Result<()> {
    let options = |kills, runs, seed| Options { kills, runs, seed };
    assert_eq!(parse(&[])?, options(Some(CI_KILLS), None, None));
    assert_eq!(
        parse(&["--seed", "7"])?,
        options(Some(CI_KILLS), None, Some(7))
    );
    assert_eq!(parse(&["--kills", "50"])?, options(Some(50), None, None));
    assert_eq!(parse(&["--runs", "20"])?, options(None, Some(20), None));
    assert_eq!(
        parse(&["--runs=20", "--seed=3"])?,
        options(None, Some(20), Some(3))
    );
    assert_eq!(
        parse(&["--kills", "9", "--runs", "10", "--seed", "1"])?,
        options(Some(9), Some(10), Some(1))
    );
    Ok(())
}
