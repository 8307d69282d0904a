//! Opening a database: a new schema is created, an older one migrated in place (from every
//! earlier version), and a schema that is not the reaper's, is damaged, or is newer than this
//! build is refused with a message saying what to do, before anything is written.

mod common;

use reaper_postgres::{OpenError, PostgresOptions, PostgresStore};

#[tokio::test]
async fn a_remote_host_without_tls_is_refused_before_connecting() {
    let options = PostgresOptions::new("postgres://app@db.example.com:5432/app?sslmode=disable");
    match PostgresStore::open(options).await {
        Err(e @ OpenError::TlsRequired { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("db.example.com") && m.contains("sslmode=disable"),
                "{m}"
            );
            assert!(!m.contains("app@"), "no credentials in the message: {m}");
        }
        other => panic!("expected a TLS refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_url_that_does_not_parse_says_what_was_expected() {
    let err = PostgresStore::open(PostgresOptions::new("postgres://[::1"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("postgres://USER@HOST"), "{err}");
    let err = PostgresStore::open(
        PostgresOptions::new("postgres://u@localhost/db").with_schema("Robert'); DROP"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("not a plain identifier"), "{err}");
}

#[cfg(reaper_test_postgres)]
mod on_a_server {
    use super::common::{self, raw_client};
    use reaper_core::{NewRun, RunPatch, RunStore};
    use reaper_postgres::{OpenError, PostgresStore, SCHEMA_VERSION};

    async fn versions(schema: &str) -> Vec<i32> {
        raw_client()
            .await
            .query(
                &format!("SELECT version FROM \"{schema}\".schema_migrations ORDER BY version"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    #[tokio::test]
    async fn a_new_schema_is_created_at_the_current_version_and_reopened_without_migrating() {
        let options = common::options("fresh");
        let store = PostgresStore::open(options.clone()).await.unwrap();
        assert_eq!(
            versions(store.schema()).await,
            (1..=SCHEMA_VERSION as i32).collect::<Vec<_>>()
        );
        drop(store);
        let again = PostgresStore::open(options).await.unwrap();
        assert_eq!(
            versions(again.schema()).await.len(),
            SCHEMA_VERSION as usize
        );
    }

    #[tokio::test]
    async fn every_earlier_version_migrates_in_place_and_keeps_its_runs() {
        for from in 0..SCHEMA_VERSION {
            let options = common::options(&format!("from{from}"));
            let old = PostgresStore::migrate_to(options.clone(), from)
                .await
                .unwrap();
            if from >= 1 {
                old.create_or_resume(NewRun {
                    run_id: "kept".into(),
                    thread_id: "t".into(),
                    started_at: 5,
                    status: None,
                })
                .await
                .unwrap();
            }
            drop(old);
            let store = PostgresStore::open(options).await.unwrap();
            assert_eq!(
                versions(store.schema()).await,
                (1..=SCHEMA_VERSION as i32).collect::<Vec<_>>(),
                "from version {from}"
            );
            if from >= 1 {
                assert!(
                    store.get("kept").await.unwrap().is_some(),
                    "from version {from}"
                );
            }
            // The migrated schema works: a write and a read back.
            store
                .create_or_resume(NewRun {
                    run_id: "new".into(),
                    thread_id: "t".into(),
                    started_at: 6,
                    status: None,
                })
                .await
                .unwrap();
            store
                .update(
                    "new",
                    RunPatch {
                        detached_since: reaper_core::Patch::Set(7),
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            assert_eq!(
                store.get("new").await.unwrap().unwrap().detached_since,
                Some(7)
            );
        }
    }

    #[tokio::test]
    async fn two_reapers_opening_a_new_schema_at_once_migrate_it_once() {
        let options = common::options("race");
        let (a, b) = tokio::join!(
            PostgresStore::open(options.clone()),
            PostgresStore::open(options.clone())
        );
        a.unwrap();
        let b = b.unwrap();
        assert_eq!(versions(b.schema()).await.len(), SCHEMA_VERSION as usize);
    }

    #[tokio::test]
    async fn a_schema_of_another_application_is_refused_and_left_untouched() {
        let options = common::options("foreign");
        let c = raw_client().await;
        c.batch_execute(&format!(
            "CREATE SCHEMA \"{s}\"; CREATE TABLE \"{s}\".orders (id int)",
            s = options.schema
        ))
        .await
        .unwrap();
        let err = PostgresStore::open(options.clone()).await.unwrap_err();
        assert!(matches!(err, OpenError::Foreign { .. }), "{err:?}");
        assert!(err.to_string().contains("orders"), "{err}");
        let tables: i64 = c
            .query_one(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = $1",
                &[&options.schema],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            tables, 1,
            "nothing was created beside the application's table"
        );
    }

    #[tokio::test]
    async fn a_schema_newer_than_this_build_is_refused() {
        let options = common::options("newer");
        let store = PostgresStore::open(options.clone()).await.unwrap();
        raw_client()
            .await
            .execute(
                &store
                    .sql("INSERT INTO @.schema_migrations (version, description) VALUES (99, 'x')"),
                &[],
            )
            .await
            .unwrap();
        let err = PostgresStore::open(options).await.unwrap_err();
        assert!(
            matches!(err, OpenError::TooNew { found: 99, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("upgrade the reaper"), "{err}");
    }

    #[tokio::test]
    async fn a_schema_missing_a_table_or_its_version_is_refused_as_damaged() {
        for (tag, damage, named) in [
            (
                "droptable",
                "DROP TABLE @.leases",
                "table leases is missing",
            ),
            (
                "dropcol",
                "ALTER TABLE @.runs DROP COLUMN driver_epoch",
                "driver_epoch",
            ),
            (
                "noversion",
                "DELETE FROM @.schema_migrations",
                "no version row",
            ),
        ] {
            let options = common::options(tag);
            let store = PostgresStore::open(options.clone()).await.unwrap();
            raw_client()
                .await
                .batch_execute(&store.sql(damage))
                .await
                .unwrap();
            let err = PostgresStore::open(options).await.unwrap_err();
            assert!(err.is_damaged(), "{tag}: {err:?}");
            let m = err.to_string();
            assert!(
                m.contains(named) && m.contains("changed nothing"),
                "{tag}: {m}"
            );
        }
    }

    #[tokio::test]
    async fn a_read_only_open_refuses_a_schema_that_needs_creating() {
        let err = PostgresStore::open_read_only(common::options("ro"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, OpenError::NeedsMigration { found: 0, .. }),
            "{err:?}"
        );
    }
}
