//! Bootstrap heads on discrete SAC's critics ([`SacConfig::ensemble`](super::SacConfig::ensemble)).
//!
//! Each critic's output layer has `heads x d` outputs: head `k` owns outputs
//! `k d .. (k + 1) d`, so `Q_{i,k}(s, a) = <g_{i,k}(s), f_a>`, and every layer below is
//! the critic's shared torso (bootstrapped DQN's layout, `dqn/ensemble.rs`). Per head:
//!
//! - target `y_k = r + gamma (1 - terminated) sum_a' pi(a' | s') (min_i Q'_{i,k}(s', a')
//!   - alpha log pi(a' | s'))`, from the head's own target heads;
//! - loss `L_k = 0.5 mean_b m_{b,k} (Q_{i,k}(s_b, a_b) - y_{b,k})^2` for each critic,
//!   `m_{b,k}` bit `k` of row `b`'s bootstrap mask (drawn by storage position as DQN's:
//!   the same row always trains the same heads);
//! - the head's parameters get `grad L_k`, the torso (and the observations' gradient a
//!   summarizer trains on) `(1/K) sum_k grad L_k`, as in Osband et al. (2016).
//!
//! The actor and the entropy coefficient see the ensemble's mean critic vectors
//! `mean_k g_{i,k}(s)` (so `min_i` of the heads' mean Q-values, which is exact with two
//! vectors per row since Q is linear in `g`); acting is the actor's, unchanged. One
//! head (`None`) is the plain learner bit for bit: every helper below is a copy or a
//! division by 1.0 there.

use rl_nn::Mlp;

/// Head `k` of `rows` rows of `heads x d` outputs: `src` itself for one head, else
/// gathered into `buf` (`rows x d`).
pub(super) fn head_of<'a>(
    src: &'a [f32],
    rows: usize,
    d: usize,
    heads: usize,
    k: usize,
    buf: &'a mut [f32],
) -> &'a [f32] {
    if heads == 1 {
        return &src[..rows * d];
    }
    let width = heads * d;
    for (dst, row) in buf[..rows * d]
        .chunks_exact_mut(d)
        .zip(src[..rows * width].chunks_exact(width))
    {
        dst.copy_from_slice(&row[k * d..(k + 1) * d]);
    }
    &buf[..rows * d]
}

/// Writes `src` (`rows x d`) into head `k` of `dst` (`rows x heads x d`).
pub(super) fn scatter_head(
    dst: &mut [f32],
    src: &[f32],
    rows: usize,
    d: usize,
    heads: usize,
    k: usize,
) {
    let width = heads * d;
    for (row, s) in dst[..rows * width]
        .chunks_exact_mut(width)
        .zip(src[..rows * d].chunks_exact(d))
    {
        row[k * d..(k + 1) * d].copy_from_slice(s);
    }
}

/// The mean over the heads of `src` (`rows x heads x d`) into `dst` (`rows x d`).
pub(super) fn mean_heads(src: &[f32], rows: usize, d: usize, heads: usize, dst: &mut [f32]) {
    let width = heads * d;
    let inv = 1.0 / heads as f32;
    for (out, row) in dst[..rows * d]
        .chunks_exact_mut(d)
        .zip(src[..rows * width].chunks_exact(width))
    {
        out.copy_from_slice(&row[..d]);
        for k in 1..heads {
            for (o, &x) in out.iter_mut().zip(&row[k * d..(k + 1) * d]) {
                *o += x;
            }
        }
        if heads > 1 {
            out.iter_mut().for_each(|o| *o *= inv);
        }
    }
}

/// `0.5 mean_b m_b (q_b - y_b)^2` over all rows, `m_b` bit `k` of `masks[b]` (every row
/// without masks), with its gradient with respect to `q` written to `dq`. Without
/// masks it is [`super::half_squared_error`] exactly.
pub(super) fn masked_half_squared_error(
    q: &[f32],
    target: &[f32],
    masks: Option<&[i64]>,
    k: usize,
    dq: &mut [f32],
) -> f32 {
    let Some(masks) = masks else {
        return super::half_squared_error(q, target, dq);
    };
    let n = q.len() as f32;
    let mut loss = 0.0;
    for (((&q, &y), d), &m) in q.iter().zip(target).zip(dq.iter_mut()).zip(masks) {
        if (m as u64 >> k) & 1 == 1 {
            let err = q - y;
            loss += 0.5 * err * err / n;
            *d = err / n;
        } else {
            *d = 0.0;
        }
    }
    loss
}

/// Multiplies the torso's gradients (every layer but the output layer) by `scale`.
pub(super) fn scale_torso(net: &Mlp, grads: &mut [f32], scale: f32) {
    let layers = net.layers();
    let Some(last) = layers.last() else {
        return;
    };
    let (weight, bias) = (last.weight(), last.bias());
    for (i, g) in grads.iter_mut().enumerate() {
        if !weight.contains(&i) && !bias.contains(&i) {
            *g *= scale;
        }
    }
}
