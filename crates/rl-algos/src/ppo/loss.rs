//! PPO's losses as loss-and-gradient functions over per-row values: what the policy's
//! backward pass takes.

use crate::error::Result;
use crate::policy::check_len as check_rows;

/// The clipped surrogate loss `-mean(min(r A, clamp(r, 1 - clip, 1 + clip) A))` with
/// `r = exp(log_probs - old_log_probs)`; writes its gradient with respect to each
/// log-prob into `grads` and returns the loss. Allocates nothing.
///
/// The gradient of row `i` is `-r_i A_i / n` where the unclipped term is the minimum
/// (inside the clip range both terms are equal and the clamp passes the gradient), and 0
/// where clipping binds (the ratio is past the range on the side the advantage pushes
/// it). At an exact tie (the ratio exactly on a clip bound, so that both terms are
/// equal) the unclipped term is taken as the minimum and its gradient `-r_i A_i / n`
/// flows: the one subgradient of the min used everywhere. Sums run in `f64`.
///
/// # Errors
/// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when the slices do not all have the
/// same number of rows.
pub fn clipped_surrogate(
    log_probs: &[f32],
    old_log_probs: &[f32],
    advantages: &[f32],
    clip: f32,
    grads: &mut [f32],
) -> Result<f32> {
    let rows = log_probs.len();
    check_rows("old log-probs", rows, old_log_probs.len())?;
    check_rows("advantages", rows, advantages.len())?;
    check_rows("log-prob gradients", rows, grads.len())?;
    if rows == 0 {
        return Ok(0.0);
    }
    let n = rows as f32;
    let mut sum = 0.0f64;
    for (((&lp, &old), &a), g) in log_probs
        .iter()
        .zip(old_log_probs)
        .zip(advantages)
        .zip(grads.iter_mut())
    {
        let ratio = (lp - old).exp();
        let unclipped = ratio * a;
        let clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * a;
        let chosen = unclipped.min(clipped);
        sum += f64::from(chosen);
        *g = if unclipped <= clipped {
            -unclipped / n
        } else {
            0.0
        };
    }
    Ok(-(sum / rows as f64) as f32)
}

/// The value loss `mean((V - R)^2)`, or with value clipping (`old_values` and the limit
/// `c`) `mean(max((V - R)^2, (V_old + clamp(V - V_old, -c, c) - R)^2))`; writes its
/// gradient with respect to each value into `grads` and returns the loss. Allocates
/// nothing.
///
/// Where the clipped error is the larger and the value moved past the limit, the
/// gradient is 0 (the clamp is flat there); ties take the unclipped error's gradient.
///
/// # Errors
/// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when the slices do not all have the
/// same number of rows.
pub fn value_loss(
    values: &[f32],
    returns: &[f32],
    old_values: Option<(&[f32], f32)>,
    grads: &mut [f32],
) -> Result<f32> {
    let rows = values.len();
    check_rows("returns", rows, returns.len())?;
    check_rows("value gradients", rows, grads.len())?;
    if let Some((old, _)) = old_values {
        check_rows("old values", rows, old.len())?;
    }
    if rows == 0 {
        return Ok(0.0);
    }
    let n = rows as f32;
    let mut sum = 0.0f64;
    for (i, ((&v, &r), g)) in values.iter().zip(returns).zip(grads.iter_mut()).enumerate() {
        let error = v - r;
        let unclipped = error * error;
        match old_values {
            None => {
                sum += f64::from(unclipped);
                *g = 2.0 * error / n;
            }
            Some((old, limit)) => {
                let moved = v - old[i];
                let clipped_value = old[i] + moved.clamp(-limit, limit);
                let clipped_error = clipped_value - r;
                let clipped = clipped_error * clipped_error;
                if unclipped >= clipped {
                    sum += f64::from(unclipped);
                    *g = 2.0 * error / n;
                } else {
                    sum += f64::from(clipped);
                    let inside = moved.abs() < limit;
                    *g = if inside { 2.0 * clipped_error / n } else { 0.0 };
                }
            }
        }
    }
    Ok((sum / rows as f64) as f32)
}
