//! SCHEMA.md is the contract applications write against: its title and its version table must
//! say what the migrations in `reaper_sql::schema` do.

use reaper_sql::schema::{MIGRATIONS, SCHEMA_VERSION};

#[test]
fn schema_doc_lists_every_migration_and_the_current_version() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/SCHEMA.md")).unwrap();
    assert!(
        doc.lines()
            .next()
            .unwrap()
            .contains(&format!("(version {SCHEMA_VERSION})")),
        "the title names version {SCHEMA_VERSION}"
    );
    for m in MIGRATIONS {
        let row = format!("| {} | {} |", m.version, m.description);
        assert!(
            doc.contains(&row),
            "SCHEMA.md's version table has no row {row:?}: add what migration {} adds",
            m.version
        );
    }
}
