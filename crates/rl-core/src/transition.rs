//! The one transition layout collectors, buffers and trainers agree on: named fields and a
//! builder of the schemas made of them, so that no column name is spelled anywhere else.

use std::fmt;

use crate::error::Result;
use crate::{Column, DType, Schema, Space};

/// A field of a transition, and the name of its column in a [`Schema`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The observation the action was chosen from (`obs`).
    Obs,
    /// The action: a `u32` index for discrete spaces, the box's elements otherwise
    /// (`action`).
    Action,
    /// The reward received (`reward`, `f32`).
    Reward,
    /// Whether the episode ended in a terminal state (`terminated`, a flag).
    Terminated,
    /// Whether the episode was cut by a time limit (`truncated`, a flag; its next state
    /// still bootstraps).
    Truncated,
    /// The observation after the step, the final one when the episode ended
    /// (`next_obs`).
    NextObs,
    /// `log pi(a | s)` of the acting policy (`log_prob`, `f32`).
    LogProb,
    /// `V(s)` of the acting policy (`value`, `f32`).
    Value,
    /// `V(next_obs)` where a trajectory is cut without terminating: at a truncation (the
    /// final observation's value) and at the last step of a rollout; 0 elsewhere
    /// (`final_value`, `f32`). What on-policy learners bootstrap from.
    FinalValue,
}

impl Field {
    /// Every field, in the order a full transition lays its columns out.
    pub const ALL: [Field; 9] = [
        Field::Obs,
        Field::Action,
        Field::Reward,
        Field::Terminated,
        Field::Truncated,
        Field::NextObs,
        Field::LogProb,
        Field::Value,
        Field::FinalValue,
    ];

    /// The column name.
    pub const fn name(self) -> &'static str {
        match self {
            Field::Obs => "obs",
            Field::Action => "action",
            Field::Reward => "reward",
            Field::Terminated => "terminated",
            Field::Truncated => "truncated",
            Field::NextObs => "next_obs",
            Field::LogProb => "log_prob",
            Field::Value => "value",
            Field::FinalValue => "final_value",
        }
    }

    /// The field whose column is named `name`, if any.
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Builds transition schemas: observation, action, reward and both end flags always, the
/// next observation and the acting policy's log-prob and value on request, or the layout
/// of an on-policy rollout ([`TransitionSchema::for_rollout`]).
///
/// ```
/// use rl_core::{Field, Space, TransitionSchema};
///
/// let obs = Space::Box(rl_core::BoxSpace::uniform(-1.0, 1.0, &[4], rl_core::DType::F32)?);
/// let schema = TransitionSchema::for_spaces(&obs, &Space::discrete(2)?)
///     .with_next_obs()
///     .build()?;
/// assert_eq!(schema.index_of(Field::NextObs.name()), Some(5));
/// # Ok::<(), rl_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TransitionSchema {
    obs: (DType, Vec<usize>),
    action: (DType, Vec<usize>),
    next_obs: bool,
    policy_outputs: bool,
    final_value: bool,
}

impl TransitionSchema {
    /// Observations of `obs_dtype` and `obs_shape`; actions of `action_dtype` and
    /// `action_shape` (empty for a scalar index).
    pub fn new(
        obs_dtype: DType,
        obs_shape: &[usize],
        action_dtype: DType,
        action_shape: &[usize],
    ) -> Self {
        Self {
            obs: (obs_dtype, obs_shape.to_vec()),
            action: (action_dtype, action_shape.to_vec()),
            next_obs: false,
            policy_outputs: false,
            final_value: false,
        }
    }

    /// The layout for an environment's spaces: a discrete action space stores `u32`
    /// indices, a box its elements.
    pub fn for_spaces(observation: &Space, action: &Space) -> Self {
        let shape = |space: &Space| match space {
            Space::Discrete { .. } => (DType::U32, Vec::new()),
            Space::Box(b) => (b.dtype(), b.shape().to_vec()),
        };
        let (obs_dtype, obs_shape) = shape(observation);
        let (action_dtype, action_shape) = shape(action);
        Self::new(obs_dtype, &obs_shape, action_dtype, &action_shape)
    }

    /// Adds [`Field::NextObs`] (replay buffers for off-policy learning).
    pub fn with_next_obs(mut self) -> Self {
        self.next_obs = true;
        self
    }

    /// Adds [`Field::LogProb`] and [`Field::Value`] (what an actor-critic records).
    pub fn with_log_prob_and_value(mut self) -> Self {
        self.policy_outputs = true;
        self
    }

    /// The layout of an on-policy rollout: adds [`Field::LogProb`], [`Field::Value`] and
    /// [`Field::FinalValue`] (no next observation: the values of the cut points stand in
    /// for it).
    pub fn for_rollout(mut self) -> Self {
        self.policy_outputs = true;
        self.final_value = true;
        self
    }

    /// The schema, its columns in [`Field::ALL`]'s order.
    ///
    /// # Errors
    /// As [`Schema::new`] (a zero dimension in a shape).
    pub fn build(&self) -> Result<Schema> {
        let column = |field: Field, (dtype, shape): &(DType, Vec<usize>)| {
            if shape.is_empty() {
                Column::scalar(field.name(), *dtype)
            } else {
                Column::new(field.name(), *dtype, shape)
            }
        };
        let mut columns = vec![
            column(Field::Obs, &self.obs),
            column(Field::Action, &self.action),
            Column::scalar(Field::Reward.name(), DType::F32),
            Column::scalar(Field::Terminated.name(), DType::Bool),
            Column::scalar(Field::Truncated.name(), DType::Bool),
        ];
        if self.next_obs {
            columns.push(column(Field::NextObs, &self.obs));
        }
        if self.policy_outputs {
            columns.push(Column::scalar(Field::LogProb.name(), DType::F32));
            columns.push(Column::scalar(Field::Value.name(), DType::F32));
        }
        if self.final_value {
            columns.push(Column::scalar(Field::FinalValue.name(), DType::F32));
        }
        Schema::new(columns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for field in Field::ALL {
            assert_eq!(Field::from_name(field.name()), Some(field));
            assert_eq!(field.to_string(), field.name());
        }
        assert_eq!(Field::from_name("next_observation"), None);
        let mut names: Vec<_> = Field::ALL.iter().map(|f| f.name()).collect();
        names.dedup();
        assert_eq!(names.len(), Field::ALL.len());
    }

    #[test]
    fn schemas_follow_the_spaces_and_options() {
        let obs =
            Space::Box(crate::BoxSpace::uniform(0.0, 255.0, &[4, 84, 84], DType::U8).unwrap());
        let act = Space::Box(crate::BoxSpace::uniform(-1.0, 1.0, &[3], DType::F32).unwrap());
        let plain = TransitionSchema::for_spaces(&obs, &act).build().unwrap();
        let names: Vec<_> = plain
            .columns()
            .iter()
            .map(|c| c.name().to_owned())
            .collect();
        assert_eq!(
            names,
            ["obs", "action", "reward", "terminated", "truncated"]
        );
        let full = TransitionSchema::for_spaces(&obs, &Space::discrete(6).unwrap())
            .with_next_obs()
            .with_log_prob_and_value()
            .build()
            .unwrap();
        assert_eq!(full.columns().len(), 8);
        for (column, field) in full.columns().iter().zip(Field::ALL) {
            assert_eq!(column.name(), field.name());
        }
        let rollout = TransitionSchema::for_spaces(&obs, &act)
            .for_rollout()
            .build()
            .unwrap();
        let names: Vec<_> = rollout.columns().iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "obs",
                "action",
                "reward",
                "terminated",
                "truncated",
                "log_prob",
                "value",
                "final_value"
            ]
        );
        assert_eq!(full.columns()[1].dtype(), DType::U32);
        assert_eq!(full.columns()[5].dtype(), DType::U8);
        assert!(
            TransitionSchema::new(DType::F32, &[0], DType::U32, &[])
                .build()
                .is_err()
        );
    }
}
