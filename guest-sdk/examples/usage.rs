//! Usage: the guide's walkthrough controller (see the README, "A
//! controller with a finalizer, an owner watch and a selector").
//!
//! It watches `projects` and owns `tasks`: a task names its project as its
//! owner (and carries the label `project=<name>`). For each project it
//! counts the running tasks with a selector and writes the count to the
//! project's status. It keeps a finalizer on every project so that it sees
//! the deletion, records a `Released` event, and only then lets it go.

use leasehold_guest::{
    Context, Controller, Description, Error, Kind, Map, Outcome, Selector, retry_on_conflict,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A project's value: how many tasks may run at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Project {
    /// The most running tasks the project may have.
    pub quota: u32,
}

impl Kind for Project {
    const KIND: &'static str = "projects";
}

/// A task's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// `pending`, `running` or `done`.
    pub state: String,
}

impl Kind for Task {
    const KIND: &'static str = "tasks";
}

/// What the controller writes to a project's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Tasks of the project in state `running`.
    pub running: u32,
    /// Whether that is more than the quota.
    pub over_quota: bool,
}

/// The finalizer that holds a project until its release is recorded.
pub const RELEASE: &str = "example.com/release";

/// The controller.
#[derive(Debug, Default)]
pub struct Usages;

leasehold_guest::export_controller!(Usages);

impl Controller for Usages {
    fn describe(&self) -> Description {
        // Each change of a task reconciles the project that owns it.
        Description::new()
            .watch(Project::KIND)
            .watch_related(Task::KIND, Map::owner_of_kind(Project::KIND))
    }

    fn reconcile(&self, ctx: &Context, _kind: &str, name: &str) -> Result<Outcome, Error> {
        let projects = ctx.typed::<Project>();
        retry_on_conflict(3, || {
            let Some(project) = projects.get(name)? else {
                return Ok(Outcome::Done);
            };
            if project.is_deleting() {
                // Deleting the project deleted its tasks in the same
                // commit; record the release, then let the project go.
                ctx.transaction()
                    .remove_finalizer(&project, RELEASE)
                    .event(Project::KIND, name, "Released", "released its tasks")
                    .commit()?;
                return Ok(Outcome::Done);
            }
            // Only this project's running tasks, served by an index.
            let running = Selector::new()
                .label("project", name)
                .contains(json!({ "state": "running" }));
            let running = ctx
                .typed::<Task>()
                .list_all_selected(&running, 10_000)?
                .len() as u32;
            let usage = Usage {
                running,
                over_quota: running > project.value.quota,
            };
            if project.has_finalizer(RELEASE) && project.status::<Usage>()? == Some(usage.clone()) {
                return Ok(Outcome::Done);
            }
            ctx.transaction()
                .add_finalizer(&project, RELEASE)
                .commit()?;
            let project = projects.get(name)?.ok_or_else(|| Error::failed("gone"))?;
            ctx.transaction().update_status(&project, &usage).commit()?;
            leasehold_guest::info!("{name}: {running} running ({})", ctx.reason());
            Ok(Outcome::Done)
        })
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use leasehold_guest::{FakeHost, Metadata, ObjectKey, Reason};

    use super::*;

    /// Seed a task of `project` as a user would: owned by the project and
    /// labelled with its name.
    fn seed_task(host: &FakeHost, name: &str, project: &str, state: &str) {
        let meta = Metadata::new()
            .owner(ObjectKey::new(Project::KIND, project))
            .label("project", project);
        host.seed_with(
            Task::KIND,
            name,
            &Task {
                state: state.into(),
            },
            &meta,
        );
    }

    fn usage(host: &FakeHost, project: &str) -> Usage {
        let project = host.object::<Project>(Project::KIND, project).unwrap();
        project.status::<Usage>().unwrap().unwrap()
    }

    /// Every key the changes so far wake, with its reason.
    fn run(host: &FakeHost) -> Vec<(String, Reason)> {
        host.reconcile_changes(&Usages)
            .into_iter()
            .map(|(key, reason, _)| (key.to_string(), reason))
            .collect()
    }

    #[test]
    fn a_task_change_reconciles_its_project() {
        let host = FakeHost::new();
        host.seed(Project::KIND, "p1", &Project { quota: 1 });
        seed_task(&host, "t1", "p1", "running");
        seed_task(&host, "t2", "p1", "pending");
        // The project's own change outranks its tasks'.
        assert_eq!(run(&host), [("projects/p1".to_string(), Reason::Change)]);
        assert_eq!(
            usage(&host, "p1"),
            Usage {
                running: 1,
                over_quota: false
            }
        );

        // Its own writes (finalizer, status) wake it once more: no change.
        let commits = host.commits().len();
        assert_eq!(run(&host), [("projects/p1".to_string(), Reason::Change)]);
        assert_eq!(host.commits().len(), commits);

        // A task starts: its owner is reconciled, as related.
        seed_task(&host, "t2", "p1", "running");
        assert_eq!(run(&host), [("projects/p1".to_string(), Reason::Related)]);
        assert_eq!(
            usage(&host, "p1"),
            Usage {
                running: 2,
                over_quota: true
            }
        );
    }

    #[test]
    fn a_deleted_project_is_released_once_its_tasks_are_gone() {
        let host = FakeHost::new();
        host.seed(Project::KIND, "p1", &Project { quota: 1 });
        seed_task(&host, "t1", "p1", "running");
        run(&host);
        // The finalizer holds the project; its tasks go at once.
        host.remove(Project::KIND, "p1");
        assert!(
            host.object::<Project>(Project::KIND, "p1")
                .unwrap()
                .is_deleting()
        );
        assert!(host.object::<Task>(Task::KIND, "t1").is_none());
        run(&host);
        assert!(host.object::<Project>(Project::KIND, "p1").is_none());
        assert_eq!(host.events_with_reason("Released").len(), 1);
    }
}
