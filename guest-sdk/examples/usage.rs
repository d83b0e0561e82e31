//! Usage: the guide's walkthrough controller (see the README, "A
//! controller with a finalizer, an owner watch and a selector").
//!
//! It watches `projects` and owns `tasks`: a task names its project as its
//! owner (and carries the label `project=<name>`). For each project it
//! counts the running tasks with a selector and writes the count, and a
//! `WithinQuota` condition, to the project's status, with a warning event
//! when the project goes over its quota. It reconciles every project
//! through `finalizer()`, so that it sees the deletion, records a
//! `Released` event, and only then lets it go.

use leasehold_guest::{
    Condition, ConditionStatus, Context, Controller, Description, Error, Kind, Map, Object,
    Outcome, Selector, finalizer, get_condition, retry_on_conflict, set_condition,
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Tasks of the project in state `running`.
    pub running: u32,
    /// Whether that is more than the quota.
    pub over_quota: bool,
    /// [`WITHIN_QUOTA`]: `True` while `running` is within the quota.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The finalizer that holds a project until its release is recorded.
pub const RELEASE: &str = "example.com/release";

/// The condition type that says whether a project keeps to its quota.
pub const WITHIN_QUOTA: &str = "WithinQuota";

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
            // The first look adds the finalizer; then `count` runs while
            // the project lives, and once it is marked for deletion the
            // `Released` event goes out with the finalizer's removal.
            Ok(finalizer(
                project,
                RELEASE,
                |project| count(ctx, project),
                |project| {
                    // Deleting the project deleted its tasks in the same
                    // commit: record the release as the project goes.
                    Ok(ctx.transaction().event(
                        Project::KIND,
                        project.name.as_str(),
                        "Released",
                        "released its tasks",
                    ))
                },
            )?)
        })
    }
}

/// Count the project's running tasks and write its status if it changed.
fn count(ctx: &Context, project: &Object<Project>) -> Result<Outcome, Error> {
    let name = project.name.as_str();
    // Only this project's running tasks, served by an index.
    let running = Selector::new()
        .label("project", name)
        .contains(json!({ "state": "running" }));
    let running = ctx
        .typed::<Task>()
        .list_all_selected(&running, 10_000)?
        .len() as u32;
    let over_quota = running > project.value.quota;
    let old = project.status::<Usage>()?.unwrap_or_default();
    let mut usage = Usage {
        running,
        over_quota,
        conditions: old.conditions.clone(),
    };
    let within = if over_quota {
        Condition::new(
            WITHIN_QUOTA,
            ConditionStatus::False,
            "OverQuota",
            format!("{running} running, quota {}", project.value.quota),
        )
    } else {
        Condition::new(WITHIN_QUOTA, ConditionStatus::True, "WithinQuota", "")
    };
    // The condition's time moves only when its status does.
    let changed = set_condition(
        &mut usage.conditions,
        within.with_generation(project.generation),
    );
    if !changed && usage == old {
        return Ok(Outcome::Done);
    }
    let mut tx = ctx.transaction().update_status(project, &usage);
    let was_within = get_condition(&old.conditions, WITHIN_QUOTA).is_none_or(Condition::is_true);
    if over_quota && was_within {
        let message = format!("{running} tasks running, quota {}", project.value.quota);
        tx = tx.warning(Project::KIND, name, "OverQuota", message);
    }
    tx.commit()?;
    leasehold_guest::info!("{name}: {running} running ({})", ctx.reason());
    Ok(Outcome::Done)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use leasehold_guest::{EventType, FakeHost, Metadata, ObjectKey, Reason};

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

    /// The project's count: running tasks, and whether over quota.
    fn usage(host: &FakeHost, project: &str) -> (u32, bool) {
        let project = host.object::<Project>(Project::KIND, project).unwrap();
        let usage = project.status::<Usage>().unwrap().unwrap();
        (usage.running, usage.over_quota)
    }

    fn within_quota(host: &FakeHost, project: &str) -> Condition {
        let project = host.object::<Project>(Project::KIND, project).unwrap();
        let usage = project.status::<Usage>().unwrap().unwrap();
        get_condition(&usage.conditions, WITHIN_QUOTA)
            .unwrap()
            .clone()
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
        assert_eq!(usage(&host, "p1"), (1, false));
        assert!(within_quota(&host, "p1").is_true());

        // Its own writes (finalizer, status) wake it once more: no change.
        let commits = host.commits().len();
        assert_eq!(run(&host), [("projects/p1".to_string(), Reason::Change)]);
        assert_eq!(host.commits().len(), commits);

        // A task starts: its owner is reconciled, as related.
        seed_task(&host, "t2", "p1", "running");
        assert_eq!(run(&host), [("projects/p1".to_string(), Reason::Related)]);
        assert_eq!(usage(&host, "p1"), (2, true));
        let over = within_quota(&host, "p1");
        assert_eq!(
            (over.status, over.reason.as_str()),
            (ConditionStatus::False, "OverQuota")
        );
        let warnings = host.events_with_reason("OverQuota");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].event_type(), EventType::Warning);
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
