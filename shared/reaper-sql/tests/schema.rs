//! The migrations are the released schema, byte for byte.

use reaper_sql::MIGRATIONS;

/// What SQLite stored in `sqlite_master` for version 1 as released (one statement per entry,
/// each followed by `;` and a blank line), captured from a database written by that release.
const V1_AS_STORED: &str = include_str!("v1_as_stored.sql");

#[test]
fn version_one_statements_are_the_released_text_byte_for_byte() {
    let ours: Vec<String> = MIGRATIONS[0]
        .statements
        .iter()
        .map(|s| format!("{s};\n"))
        .collect();
    assert_eq!(ours.join("\n"), V1_AS_STORED);
    assert_eq!(MIGRATIONS[0].version, 1);
}
