//! rollout controller.
