//! The manager's per-name tasks: one for each name it keeps a certificate for, in the
//! order the names are wanted, and [`NameChanges`], which says which tasks a new set of
//! wanted names starts and stops. A name wanted before and after keeps its task, so a
//! change of names orders nothing for it.

use tokio::task::JoinHandle;

/// The running tasks, one per name. Dropping them aborts every task.
#[derive(Default)]
pub struct Tasks {
    running: Vec<Task>,
}

/// The task that keeps one name's certificate.
struct Task {
    name: String,
    handle: JoinHandle<()>,
}

impl Tasks {
    /// The names with a task, in the order they were started.
    pub fn names(&self) -> Vec<&str> {
        self.running.iter().map(|t| t.name.as_str()).collect()
    }

    /// Adds the task keeping `name`'s certificate.
    pub fn push(&mut self, name: &str, handle: JoinHandle<()>) {
        self.running.push(Task { name: name.to_string(), handle });
    }

    /// Stops the task of `name` and waits until it has ended, so it changes nothing
    /// after this returns: an order under way is abandoned (its challenge answers go
    /// with it). False when `name` has no task.
    pub async fn stop(&mut self, name: &str) -> bool {
        let Some(i) = self.running.iter().position(|t| t.name == name) else { return false };
        let task = self.running.remove(i);
        task.handle.abort();
        // A task aborted while it runs on another worker thread ends at its next await;
        // until then it may still serve a certificate for the name.
        let _ = task.handle.await;
        true
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.running {
            task.handle.abort();
        }
    }
}

/// How a new set of wanted names differs from the names with a task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameChanges {
    /// Wanted now and without a task, in the order wanted.
    pub added: Vec<String>,
    /// With a task and no longer wanted, in the order started.
    pub removed: Vec<String>,
}

impl NameChanges {
    /// What changes when `wanted` replaces `running`. Pure.
    pub fn between(running: &[&str], wanted: &[String]) -> NameChanges {
        let added = wanted.iter().filter(|w| !running.contains(&w.as_str())).cloned().collect();
        let removed = running
            .iter()
            .filter(|r| !wanted.iter().any(|w| w == *r))
            .map(|r| r.to_string())
            .collect();
        NameChanges { added, removed }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn changes_list_names_added_and_removed_and_nothing_for_names_kept() {
        let running = ["a.example", "b.example"];
        let changes = NameChanges::between(&running, &names(&["c.example", "b.example"]));
        assert_eq!(changes.added, ["c.example"]);
        assert_eq!(changes.removed, ["a.example"]);
        let same = NameChanges::between(&running, &names(&["b.example", "a.example"]));
        assert_eq!(same, NameChanges::default());
        let none = NameChanges::between(&running, &[]);
        assert_eq!((none.added.len(), none.removed.len()), (0, 2));
    }

    #[tokio::test]
    async fn a_stopped_task_has_ended_when_stop_returns() {
        let mut tasks = Tasks::default();
        let (ended_tx, mut ended) = tokio::sync::oneshot::channel::<()>();
        tasks.push(
            "a.example",
            tokio::spawn(async move {
                // Dropped when the task ends, which closes the channel.
                let _ended = ended_tx;
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }),
        );
        tasks.push("b.example", tokio::spawn(std::future::pending()));
        assert!(!tasks.stop("c.example").await);
        assert!(tasks.stop("a.example").await);
        assert!(ended
            .try_recv()
            .is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Closed));
        assert_eq!(tasks.names(), ["b.example"]);
    }
}
