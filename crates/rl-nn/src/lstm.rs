//! A long short-term memory cell on flat parameters: one step for acting, and forward and
//! backward passes over windows of steps (truncated back-propagation through time) on a
//! workspace allocated once.
//!
//! Layout follows PyTorch's `nn.LSTMCell`: four tensors `weight_ih` (`4 hidden x input`),
//! `weight_hh` (`4 hidden x hidden`), `bias_ih` and `bias_hh` (`4 hidden`), in that
//! order in the flat parameters, the gates stacked `i, f, g, o` along the first
//! dimension:
//!
//! ```text
//! i = sigmoid(x W_ii^T + b_ii + h W_hi^T + b_hi)      (input gate)
//! f = sigmoid(x W_if^T + b_if + h W_hf^T + b_hf)      (forget gate)
//! g = tanh(x W_ig^T + b_ig + h W_hg^T + b_hg)         (cell candidate)
//! o = sigmoid(x W_io^T + b_io + h W_ho^T + b_ho)      (output gate)
//! c' = f * c + i * g
//! h' = o * tanh(c')
//! ```
//!
//! The tensor names are `nn.LSTMCell`'s `state_dict` keys; a one-layer `nn.LSTM` has the
//! same tensors with `_l0` appended (`weight_ih_l0` ...).

use rand::Rng;
use rl_core::MemoryPlan;

use crate::activation::tanh;
use crate::error::{Error, Result, check_len};
use crate::linalg::{Accumulate, MatRef, WeightPack, matmul};
use crate::module::network_plan;
use crate::version::Version;
use crate::{Architecture, Module, TensorSpec, Usage, Weights};

/// A long short-term memory cell with sizes chosen at run time (PyTorch's `nn.LSTMCell`
/// layout, names and default initialisation).
///
/// Three ways to run it, all on the same parameters and the same arithmetic:
/// - [`Lstm::step`]: one time step for a batch of rows (one row per environment) on an
///   [`LstmState`] that holds each row's `(h, c)`: two products and one sweep, whatever
///   the length of the episode so far. For acting.
/// - [`Lstm::forward_sequence`] and [`Lstm::backward_sequence`]: `steps` time steps
///   over `rows` sequences on an [`LstmWorkspace`] made once for the longest window,
///   with per-step, per-row resets (an episode that starts inside a window) and a given
///   initial state per sequence. For training on fixed-length windows (truncated
///   back-propagation through time). The outputs equal `steps` calls of
///   [`Lstm::step`] (tested within 1e-6).
/// - [`Module`]: one step from the state the workspace carries, with a one-step
///   backward.
///
/// None of them allocates once its state or workspace exists.
///
/// ```
/// use rl_nn::{Lstm, Sequence, SequenceGrads, Weights};
/// use rand::SeedableRng;
///
/// # fn main() -> rl_nn::Result<()> {
/// let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
/// let lstm = Lstm::new(3, 8, &mut rng)?;
///
/// // Acting: 4 environments, one step each, state carried in `state`.
/// let mut state = lstm.state(4);
/// let h = lstm.step(&[0.5; 4 * 3], &mut state)?;
/// assert_eq!(h.len(), 4 * 8);
/// state.reset_row(2)?; // environment 2 starts a new episode
///
/// // Training: 2 windows of 5 steps (time-major), window 1 restarting at step 3.
/// let mut ws = lstm.sequence_workspace(5, 2);
/// let mut resets = vec![false; 5 * 2];
/// resets[3 * 2 + 1] = true;
/// let zeros = vec![0.0; 2 * 8];
/// let sequence = Sequence {
///     input: &[0.1; 5 * 2 * 3],
///     steps: 5,
///     rows: 2,
///     resets: Some(&resets),
///     h0: &zeros,
///     c0: &zeros,
/// };
/// let outputs = lstm.forward_sequence(sequence, &mut ws)?;
/// assert_eq!(outputs.len(), 5 * 2 * 8);
/// let mut grads = vec![0.0; lstm.num_params()];
/// let grads = SequenceGrads { params: Some(&mut grads), ..SequenceGrads::default() };
/// lstm.backward_sequence(&mut ws, &[1.0; 5 * 2 * 8], grads)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Lstm {
    input: usize,
    hidden: usize,
    params: Vec<f32>,
    /// Renewed whenever `params` may change (not part of equality).
    version: Version,
}

impl PartialEq for Lstm {
    fn eq(&self, other: &Self) -> bool {
        (self.input, self.hidden, &self.params) == (other.input, other.hidden, &other.params)
    }
}

impl Lstm {
    /// A cell of `input -> hidden` initialised as PyTorch does: every parameter uniform in
    /// `[-1/sqrt(hidden), 1/sqrt(hidden)]`.
    ///
    /// # Errors
    /// [`Error::Config`] for a zero size.
    pub fn new<R: Rng + ?Sized>(input: usize, hidden: usize, rng: &mut R) -> Result<Self> {
        let mut cell = Self::zeros(input, hidden)?;
        let bound = 1.0 / (hidden as f32).sqrt();
        for p in &mut cell.params {
            *p = rng.random_range(-bound..=bound);
        }
        Ok(cell)
    }

    /// A cell of `input -> hidden` with every parameter 0 (to load weights into).
    ///
    /// # Errors
    /// [`Error::Config`] for a zero size, or sizes whose parameters would not fit in
    /// memory.
    pub fn zeros(input: usize, hidden: usize) -> Result<Self> {
        match Self::checked_params_for(input, hidden) {
            Some(count) if input > 0 && hidden > 0 => Ok(Self {
                input,
                hidden,
                params: vec![0.0; count],
                version: Version::fresh(),
            }),
            _ => Err(Error::config(
                "lstm sizes",
                format!(
                    "are input {input}, hidden {hidden}: both must be at least 1, and 4 hidden (input + hidden + 2) parameters must fit in memory"
                ),
            )),
        }
    }

    /// [`Lstm::params_for`], or `None` when the count or its bytes do not fit an
    /// allocation (what a plan made from sizes alone reports as a configuration error).
    pub fn checked_params_for(input: usize, hidden: usize) -> Option<usize> {
        input
            .checked_add(hidden)
            .and_then(|n| n.checked_add(2))
            .and_then(|n| n.checked_mul(hidden))
            .and_then(|n| n.checked_mul(4))
            .filter(|n| {
                n.checked_mul(size_of::<f32>())
                    .is_some_and(|b| b <= isize::MAX as usize)
            })
    }

    /// Parameters of a cell of `input -> hidden`: `4 hidden (input + hidden + 2)`.
    pub const fn params_for(input: usize, hidden: usize) -> usize {
        4 * hidden * (input + hidden + 2)
    }

    /// Elements of one input row.
    pub const fn input(&self) -> usize {
        self.input
    }

    /// Elements of the hidden state `h` (the output) and of the cell state `c`.
    pub const fn hidden(&self) -> usize {
        self.hidden
    }

    /// `weight_ih`'s range in the parameters.
    fn weight_ih(&self) -> std::ops::Range<usize> {
        0..4 * self.hidden * self.input
    }

    /// `weight_hh`'s range in the parameters.
    fn weight_hh(&self) -> std::ops::Range<usize> {
        let start = 4 * self.hidden * self.input;
        start..start + 4 * self.hidden * self.hidden
    }

    /// `bias_ih`'s range in the parameters.
    fn bias_ih(&self) -> std::ops::Range<usize> {
        let start = 4 * self.hidden * (self.input + self.hidden);
        start..start + 4 * self.hidden
    }

    /// `bias_hh`'s range in the parameters.
    fn bias_hh(&self) -> std::ops::Range<usize> {
        let start = 4 * self.hidden * (self.input + self.hidden + 1);
        start..start + 4 * self.hidden
    }

    /// A zero state for `rows` rows (what [`Lstm::step`] runs on).
    pub fn state(&self, rows: usize) -> LstmState {
        LstmState {
            input: self.input,
            hidden: self.hidden,
            rows,
            h: vec![0.0; rows * self.hidden],
            c: vec![0.0; rows * self.hidden],
            gates: vec![0.0; rows * 4 * self.hidden],
        }
    }

    /// Bytes of a state for `rows` rows (what [`Lstm::state`] allocates): `h`, `c` and a
    /// row of gates per row, `6 hidden` floats.
    pub fn state_bytes(&self, rows: usize) -> u64 {
        Self::state_bytes_for(self.hidden, rows).unwrap_or(u64::MAX)
    }

    /// [`Lstm::state_bytes`] of a cell of `hidden` units, from the sizes alone; `None`
    /// on overflow.
    pub fn state_bytes_for(hidden: usize, rows: usize) -> Option<u64> {
        let bytes = rows
            .checked_mul(6)?
            .checked_mul(hidden)?
            .checked_mul(size_of::<f32>())?;
        u64::try_from(bytes).ok()
    }

    /// One time step for every row of `state`: `input` is `rows x input`, row-major;
    /// `state`'s `(h, c)` go in and come out updated; returns the new `h`
    /// (`rows x hidden`). Two matrix products (`x W_ih^T`, then `h W_hh^T` added) and one
    /// sweep over the gates; allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for an input of the wrong length,
    /// [`Error::ArchitectureMismatch`] for a state of another cell. Nothing changes then.
    pub fn step<'s>(&self, input: &[f32], state: &'s mut LstmState) -> Result<&'s [f32]> {
        if (state.input, state.hidden) != (self.input, self.hidden) {
            return Err(self.mismatch("lstm state", state.input, state.hidden));
        }
        let rows = state.rows;
        check_len("lstm input (rows x input)", rows * self.input, input.len())?;
        let gates = &mut state.gates[..];
        matmul(
            gates,
            MatRef::row_major(input, rows, self.input),
            MatRef::transposed(&self.params[self.weight_ih()], self.input, 4 * self.hidden),
            Accumulate::Overwrite,
        );
        matmul(
            gates,
            MatRef::row_major(&state.h, rows, self.hidden),
            MatRef::transposed(&self.params[self.weight_hh()], self.hidden, 4 * self.hidden),
            Accumulate::Add,
        );
        self.cell(gates, &mut state.c, &mut state.h, None);
        Ok(&state.h)
    }

    /// The gate sweep shared by every pass, so that they compute the same numbers: adds
    /// both biases to the pre-activations in `gates` (`rows x 4 hidden`) and activates
    /// them in place, replaces `c` by `c'`, writes `h'` into `h` and, if given,
    /// `tanh(c')` into `tanh_c`.
    fn cell(
        &self,
        gates: &mut [f32],
        c: &mut [f32],
        h: &mut [f32],
        mut tanh_c: Option<&mut [f32]>,
    ) {
        let hid = self.hidden;
        let (b_ih, b_hh) = (&self.params[self.bias_ih()], &self.params[self.bias_hh()]);
        let rows = gates.chunks_exact_mut(4 * hid).zip(c.chunks_exact_mut(hid));
        let rows = rows.zip(h.chunks_exact_mut(hid)).enumerate();
        for (r, ((g, c), h)) in rows {
            for ((v, &a), &b) in g.iter_mut().zip(b_ih).zip(b_hh) {
                *v = *v + a + b;
            }
            let (i_f, rest) = g.split_at_mut(2 * hid);
            let (cand, out) = rest.split_at_mut(hid);
            i_f.iter_mut().for_each(|v| *v = sigmoid(*v));
            cand.iter_mut().for_each(|v| *v = tanh(*v));
            out.iter_mut().for_each(|v| *v = sigmoid(*v));
            let (i, f) = i_f.split_at(hid);
            for k in 0..hid {
                c[k] = f[k] * c[k] + i[k] * cand[k];
            }
            match tanh_c.as_deref_mut() {
                Some(t) => {
                    let t = &mut t[r * hid..(r + 1) * hid];
                    for k in 0..hid {
                        t[k] = tanh(c[k]);
                        h[k] = out[k] * t[k];
                    }
                }
                None => {
                    for k in 0..hid {
                        h[k] = out[k] * tanh(c[k]);
                    }
                }
            }
        }
    }

    /// A workspace for windows of up to `max_steps` steps over up to `max_rows`
    /// sequences (what [`Lstm::forward_sequence`] and [`Lstm::backward_sequence`] run on).
    pub fn sequence_workspace(&self, max_steps: usize, max_rows: usize) -> LstmWorkspace {
        let (hid, n) = (self.hidden, max_steps * max_rows);
        LstmWorkspace {
            input: self.input,
            hidden: hid,
            max_steps,
            max_rows,
            steps: 0,
            rows: 0,
            x: vec![0.0; n * self.input],
            gates: vec![0.0; n * 4 * hid],
            dgates: vec![0.0; n * 4 * hid],
            h_in: vec![0.0; n * hid],
            c_in: vec![0.0; n * hid],
            tanh_c: vec![0.0; n * hid],
            h_out: vec![0.0; n * hid],
            resets: vec![false; n],
            h: vec![0.0; max_rows * hid],
            c: vec![0.0; max_rows * hid],
            dh: vec![0.0; max_rows * hid],
            dc: vec![0.0; max_rows * hid],
            dh_in: vec![0.0; max_rows * hid],
            w_hh_t: WeightPack::for_operand(hid, 4 * hid),
            w_hh: WeightPack::for_operand(4 * hid, hid),
        }
    }

    /// Bytes of a workspace for `max_steps x max_rows` (what
    /// [`Lstm::sequence_workspace`] allocates): per step and row, the input, the gates and
    /// their gradients, `h` and `c` entering the step, `tanh(c')`, the output and a reset
    /// flag; per row, the carried state and three rows of backward scratch.
    pub fn sequence_workspace_bytes(&self, max_steps: usize, max_rows: usize) -> u64 {
        Self::sequence_workspace_bytes_for(self.input, self.hidden, max_steps, max_rows)
            .unwrap_or(u64::MAX)
    }

    /// [`Lstm::sequence_workspace_bytes`] of a cell of `input -> hidden`, from the sizes
    /// alone; `None` on overflow.
    pub fn sequence_workspace_bytes_for(
        input: usize,
        hidden: usize,
        max_steps: usize,
        max_rows: usize,
    ) -> Option<u64> {
        let n = max_steps.checked_mul(max_rows)?;
        let per_step = hidden.checked_mul(12)?.checked_add(input)?;
        let floats = n
            .checked_mul(per_step)?
            .checked_add(max_rows.checked_mul(hidden)?.checked_mul(5)?)?;
        let packs = WeightPack::bytes(hidden, 4 * hidden)?
            .checked_add(WeightPack::bytes(4 * hidden, hidden)?)?;
        let bytes = floats
            .checked_mul(size_of::<f32>())?
            .checked_add(n)?
            .checked_add(packs)?;
        u64::try_from(bytes).ok()
    }

    /// What training on windows of `max_steps x max_rows` costs, under `name`: the
    /// parameters, a sequence workspace and, for [`Usage::Training`], gradients and Adam's
    /// two moments.
    pub fn sequence_memory_plan(
        &self,
        name: &str,
        max_steps: usize,
        max_rows: usize,
        usage: Usage,
    ) -> MemoryPlan {
        network_plan(
            name,
            self.num_params(),
            usage,
            &format!("sequence workspace ({max_steps} steps x {max_rows} rows)"),
            self.sequence_workspace_bytes(max_steps, max_rows),
        )
    }

    /// The forward pass over a window of steps ([`Sequence`]); returns the outputs `h`
    /// of every step, `steps x rows x hidden`, time-major, which live in `ws` until its
    /// next pass. Where `resets` marks a row at a step, that row's state is zeroed before
    /// the step (an episode starting inside the window); the state after the last step
    /// stays in `ws` ([`LstmWorkspace::final_h`], [`LstmWorkspace::final_c`]).
    ///
    /// The input products of all steps run as one matrix product; each step then adds
    /// `h W_hh^T` and sweeps the gates exactly as [`Lstm::step`] does.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a buffer of the wrong length or a window larger than
    /// the workspace; [`Error::ArchitectureMismatch`] for a workspace of another cell.
    /// Nothing changes then.
    pub fn forward_sequence<'w>(
        &self,
        sequence: Sequence<'_>,
        ws: &'w mut LstmWorkspace,
    ) -> Result<&'w [f32]> {
        let Sequence {
            input,
            steps,
            rows,
            resets,
            h0,
            c0,
        } = sequence;
        self.check_workspace(ws)?;
        check_len(
            "lstm initial h (rows x hidden)",
            rows * self.hidden,
            h0.len(),
        )?;
        check_len(
            "lstm initial c (rows x hidden)",
            rows * self.hidden,
            c0.len(),
        )?;
        self.run_forward(input, steps, rows, resets, Some((h0, c0)), ws)?;
        Ok(&ws.h_out[..steps * rows * self.hidden])
    }

    /// Checks shapes, then runs the window from `initial` (or from the state `ws`
    /// carries).
    fn run_forward(
        &self,
        input: &[f32],
        steps: usize,
        rows: usize,
        resets: Option<&[bool]>,
        initial: Option<(&[f32], &[f32])>,
        ws: &mut LstmWorkspace,
    ) -> Result<()> {
        self.check_workspace(ws)?;
        if steps > ws.max_steps {
            return Err(Error::shape(
                "lstm window steps (at most the workspace's max_steps)",
                ws.max_steps,
                steps,
            ));
        }
        if rows > ws.max_rows {
            return Err(Error::shape(
                "lstm window rows (at most the workspace's max_rows)",
                ws.max_rows,
                rows,
            ));
        }
        let (hid, n) = (self.hidden, steps * rows);
        check_len(
            "lstm input (steps x rows x input)",
            n * self.input,
            input.len(),
        )?;
        if let Some(resets) = resets {
            check_len("lstm resets (steps x rows)", n, resets.len())?;
        }
        ws.steps = steps;
        ws.rows = rows;
        ws.x[..input.len()].copy_from_slice(input);
        match resets {
            Some(resets) => ws.resets[..n].copy_from_slice(resets),
            None => ws.resets[..n].fill(false),
        }
        if let Some((h0, c0)) = initial {
            ws.h[..rows * hid].copy_from_slice(h0);
            ws.c[..rows * hid].copy_from_slice(c0);
        }
        let LstmWorkspace {
            x,
            gates,
            h_in,
            c_in,
            tanh_c,
            h_out,
            resets,
            h,
            c,
            w_hh_t,
            ..
        } = ws;
        matmul(
            &mut gates[..n * 4 * hid],
            MatRef::row_major(&x[..n * self.input], n, self.input),
            MatRef::transposed(&self.params[self.weight_ih()], self.input, 4 * hid),
            Accumulate::Overwrite,
        );
        let (h, c) = (&mut h[..rows * hid], &mut c[..rows * hid]);
        let w_hh = MatRef::transposed(&self.params[self.weight_hh()], hid, 4 * hid);
        for t in 0..steps {
            let span = t * rows * hid..(t + 1) * rows * hid;
            for (r, &reset) in resets[t * rows..(t + 1) * rows].iter().enumerate() {
                if reset {
                    h[r * hid..(r + 1) * hid].fill(0.0);
                    c[r * hid..(r + 1) * hid].fill(0.0);
                }
            }
            h_in[span.clone()].copy_from_slice(h);
            c_in[span.clone()].copy_from_slice(c);
            let g = &mut gates[t * rows * 4 * hid..(t + 1) * rows * 4 * hid];
            w_hh_t.matmul(
                None,
                self.version.get(),
                g,
                MatRef::row_major(&h_in[span.clone()], rows, hid),
                w_hh,
                Accumulate::Add,
            );
            self.cell(g, c, h, Some(&mut tanh_c[span.clone()]));
            h_out[span].copy_from_slice(h);
        }
        Ok(())
    }

    /// The backward pass of the last forward pass through `ws`, given the gradient of a
    /// loss with respect to every step's output (`steps x rows x hidden`, time-major,
    /// like the outputs). Gradients flow back through the window and stop at its start
    /// (truncated back-propagation through time) and at every reset. Adds parameter
    /// gradients into `grads.params` and writes (overwrites) gradients of the inputs and
    /// of the initial state into the other buffers given (zero for a row reset at step
    /// 0).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length;
    /// [`Error::ArchitectureMismatch`] for a workspace of another cell. Nothing changes
    /// then.
    pub fn backward_sequence(
        &self,
        ws: &mut LstmWorkspace,
        output_grads: &[f32],
        grads: SequenceGrads<'_>,
    ) -> Result<()> {
        self.check_workspace(ws)?;
        let (hid, steps, rows) = (self.hidden, ws.steps, ws.rows);
        let n = steps * rows;
        check_len(
            "lstm output gradients (steps x rows x hidden)",
            n * hid,
            output_grads.len(),
        )?;
        let SequenceGrads {
            params,
            input,
            h0,
            c0,
        } = grads;
        if let Some(g) = &params {
            check_len("lstm parameter gradients", self.params.len(), g.len())?;
        }
        if let Some(g) = &input {
            check_len(
                "lstm input gradients (steps x rows x input)",
                n * self.input,
                g.len(),
            )?;
        }
        for g in [&h0, &c0].into_iter().flatten() {
            check_len(
                "lstm initial state gradients (rows x hidden)",
                rows * hid,
                g.len(),
            )?;
        }
        let want_initial = h0.is_some() || c0.is_some();
        let LstmWorkspace {
            x,
            gates,
            dgates,
            h_in,
            c_in,
            tanh_c,
            resets,
            dh,
            dc,
            dh_in,
            w_hh: w_hh_pack,
            ..
        } = ws;
        let (dh, dc, dh_in) = (
            &mut dh[..rows * hid],
            &mut dc[..rows * hid],
            &mut dh_in[..rows * hid],
        );
        dh.fill(0.0);
        dc.fill(0.0);
        let w_hh = MatRef::row_major(&self.params[self.weight_hh()], 4 * hid, hid);
        for t in (0..steps).rev() {
            let (g4, gh) = (t * rows * 4 * hid, t * rows * hid);
            for r in 0..rows {
                let acts = &gates[g4 + r * 4 * hid..g4 + (r + 1) * 4 * hid];
                let dacts = &mut dgates[g4 + r * 4 * hid..g4 + (r + 1) * 4 * hid];
                let at = gh + r * hid;
                for k in 0..hid {
                    let (i, f, g, o) =
                        (acts[k], acts[hid + k], acts[2 * hid + k], acts[3 * hid + k]);
                    let tc = tanh_c[at + k];
                    let dh_total = output_grads[at + k] + dh[r * hid + k];
                    let dc_total = dc[r * hid + k] + dh_total * o * (1.0 - tc * tc);
                    dacts[k] = dc_total * g * i * (1.0 - i);
                    dacts[hid + k] = dc_total * c_in[at + k] * f * (1.0 - f);
                    dacts[2 * hid + k] = dc_total * i * (1.0 - g * g);
                    dacts[3 * hid + k] = dh_total * tc * o * (1.0 - o);
                    dc[r * hid + k] = dc_total * f;
                }
            }
            if t > 0 || want_initial {
                w_hh_pack.matmul(
                    None,
                    self.version.get(),
                    dh_in,
                    MatRef::row_major(&dgates[g4..g4 + rows * 4 * hid], rows, 4 * hid),
                    w_hh,
                    Accumulate::Overwrite,
                );
                dh.copy_from_slice(dh_in);
            }
            // A reset zeroed the state entering the step: nothing flows past it.
            for (r, &reset) in resets[t * rows..(t + 1) * rows].iter().enumerate() {
                if reset {
                    dh[r * hid..(r + 1) * hid].fill(0.0);
                    dc[r * hid..(r + 1) * hid].fill(0.0);
                }
            }
        }
        if let Some(g) = h0 {
            g.copy_from_slice(dh);
        }
        if let Some(g) = c0 {
            g.copy_from_slice(dc);
        }
        let dg = &dgates[..n * 4 * hid];
        if let Some(p) = params {
            let dg_t = MatRef::transposed(dg, 4 * hid, n);
            matmul(
                &mut p[self.weight_ih()],
                dg_t,
                MatRef::row_major(&x[..n * self.input], n, self.input),
                Accumulate::Add,
            );
            matmul(
                &mut p[self.weight_hh()],
                dg_t,
                MatRef::row_major(&h_in[..n * hid], n, hid),
                Accumulate::Add,
            );
            let (b_ih, b_hh) = (self.bias_ih(), self.bias_hh());
            let (head, b_hh) = p.split_at_mut(b_hh.start);
            let b_ih = &mut head[b_ih];
            for row in dg.chunks_exact(4 * hid) {
                for ((a, b), &d) in b_ih.iter_mut().zip(b_hh.iter_mut()).zip(row) {
                    *a += d;
                    *b += d;
                }
            }
        }
        if let Some(dx) = input {
            matmul(
                dx,
                MatRef::row_major(dg, n, 4 * hid),
                MatRef::row_major(&self.params[self.weight_ih()], 4 * hid, self.input),
                Accumulate::Overwrite,
            );
        }
        Ok(())
    }

    fn check_workspace(&self, ws: &LstmWorkspace) -> Result<()> {
        if (ws.input, ws.hidden) != (self.input, self.hidden) {
            return Err(self.mismatch("lstm workspace", ws.input, ws.hidden));
        }
        Ok(())
    }

    fn mismatch(&self, what: &str, input: usize, hidden: usize) -> Error {
        Error::ArchitectureMismatch {
            what: what.to_owned(),
            expected: self.architecture(),
            found: Architecture::Lstm { input, hidden },
        }
    }
}

/// `1 / (1 + exp(-x))` as `(1 + tanh(x / 2)) / 2`, on the crate's vectorising `tanh`
/// (absolute error a few `f32` ulps of 1).
#[inline]
fn sigmoid(x: f32) -> f32 {
    0.5 + 0.5 * tanh(0.5 * x)
}

impl Weights for Lstm {
    fn architecture(&self) -> Architecture {
        Architecture::Lstm {
            input: self.input,
            hidden: self.hidden,
        }
    }

    fn params(&self) -> &[f32] {
        &self.params
    }

    fn params_mut(&mut self) -> &mut [f32] {
        self.version = Version::fresh();
        &mut self.params
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let four = 4 * self.hidden;
        [
            ("weight_ih", vec![four, self.input], self.weight_ih()),
            ("weight_hh", vec![four, self.hidden], self.weight_hh()),
            ("bias_ih", vec![four], self.bias_ih()),
            ("bias_hh", vec![four], self.bias_hh()),
        ]
        .into_iter()
        .map(|(name, shape, range)| TensorSpec {
            name: name.to_owned(),
            shape,
            offset: range.start,
        })
        .collect()
    }
}

/// The layer's conventions for a recurrent cell: one `forward` is one time step from the
/// state the workspace carries (zero at first, per row, until
/// [`LstmWorkspace::reset_row`] zeroes a row), `backward` is the backward pass of the
/// last pass through the workspace (for a one-step `forward`, gradients stop at the
/// carried state), and [`Module::workspace`] is a one-step [`Lstm::sequence_workspace`].
impl Module for Lstm {
    type Workspace = LstmWorkspace;

    fn input_dim(&self) -> usize {
        self.input
    }

    fn output_dim(&self) -> usize {
        self.hidden
    }

    fn workspace(&self, max_rows: usize) -> LstmWorkspace {
        self.sequence_workspace(1, max_rows)
    }

    fn workspace_bytes(&self, max_rows: usize) -> u64 {
        self.sequence_workspace_bytes(1, max_rows)
    }

    fn forward<'w>(
        &self,
        input: &[f32],
        rows: usize,
        ws: &'w mut LstmWorkspace,
    ) -> Result<&'w [f32]> {
        self.run_forward(input, 1, rows, None, None, ws)?;
        Ok(&ws.h_out[..rows * self.hidden])
    }

    fn backward(
        &self,
        ws: &mut LstmWorkspace,
        output_grads: &[f32],
        param_grads: Option<&mut [f32]>,
        input_grads: Option<&mut [f32]>,
    ) -> Result<()> {
        let grads = SequenceGrads {
            params: param_grads,
            input: input_grads,
            ..SequenceGrads::default()
        };
        self.backward_sequence(ws, output_grads, grads)
    }
}

/// A window of steps for [`Lstm::forward_sequence`]: `rows` sequences of `steps` steps,
/// stored time-major (step after step, each step's rows together, as a rollout of
/// `steps x envs` rows is).
#[derive(Clone, Copy, Debug)]
pub struct Sequence<'a> {
    /// `steps x rows x input` input elements, time-major.
    pub input: &'a [f32],
    /// Steps of the window (at most the workspace's `max_steps`).
    pub steps: usize,
    /// Sequences of the window (at most the workspace's `max_rows`).
    pub rows: usize,
    /// `steps x rows` flags, time-major: where set, the row's state is zeroed before the
    /// step (its episode starts there). `None`: no resets inside the window.
    pub resets: Option<&'a [bool]>,
    /// Each sequence's `h` before the first step, `rows x hidden`.
    pub h0: &'a [f32],
    /// Each sequence's `c` before the first step, `rows x hidden`.
    pub c0: &'a [f32],
}

/// Where [`Lstm::backward_sequence`] writes gradients; `None` skips one.
#[derive(Debug, Default)]
pub struct SequenceGrads<'a> {
    /// Parameter gradients, added into ([`Weights::num_params`] long).
    pub params: Option<&'a mut [f32]>,
    /// Input gradients, overwritten (`steps x rows x input`).
    pub input: Option<&'a mut [f32]>,
    /// Gradients of the initial `h`, overwritten (`rows x hidden`).
    pub h0: Option<&'a mut [f32]>,
    /// Gradients of the initial `c`, overwritten (`rows x hidden`).
    pub c0: Option<&'a mut [f32]>,
}

/// The recurrent state `(h, c)` of a batch of rows (one per environment) and the gate
/// scratch of [`Lstm::step`], allocated once ([`Lstm::state`]).
#[derive(Clone, Debug)]
pub struct LstmState {
    input: usize,
    hidden: usize,
    rows: usize,
    h: Vec<f32>,
    c: Vec<f32>,
    gates: Vec<f32>,
}

impl LstmState {
    /// Rows (environments).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The architecture of the cell it was made for.
    pub fn architecture(&self) -> Architecture {
        Architecture::Lstm {
            input: self.input,
            hidden: self.hidden,
        }
    }

    /// The hidden states, `rows x hidden`.
    pub fn h(&self) -> &[f32] {
        &self.h
    }

    /// The cell states, `rows x hidden`.
    pub fn c(&self) -> &[f32] {
        &self.c
    }

    /// Both states, mutably (to load a saved state).
    pub fn h_c_mut(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.h, &mut self.c)
    }

    /// Zeroes row `row`'s `h` and `c` (its environment starts an episode).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a row past the last; nothing changes then.
    pub fn reset_row(&mut self, row: usize) -> Result<()> {
        reset(&mut self.h, &mut self.c, self.hidden, row, self.rows)
    }

    /// Zeroes every row's state.
    pub fn reset_all(&mut self) {
        self.h.fill(0.0);
        self.c.fill(0.0);
    }

    /// Bytes held by its buffers ([`Lstm::state_bytes`] of its cell).
    pub fn memory_bytes(&self) -> u64 {
        ((self.h.len() + self.c.len() + self.gates.len()) * size_of::<f32>()) as u64
    }
}

/// Zeroes one row of `h` and `c`, or says the row does not exist.
fn reset(h: &mut [f32], c: &mut [f32], hidden: usize, row: usize, rows: usize) -> Result<()> {
    if row >= rows {
        return Err(Error::shape(
            "lstm row to reset (rows of the state)",
            rows,
            row + 1,
        ));
    }
    h[row * hidden..(row + 1) * hidden].fill(0.0);
    c[row * hidden..(row + 1) * hidden].fill(0.0);
    Ok(())
}

/// Everything a window of [`Lstm`] steps keeps for its backward pass, and the state a
/// [`Module`] forward carries, for windows of up to `max_steps x max_rows`, allocated
/// once ([`Lstm::sequence_workspace`]).
#[derive(Clone, Debug)]
pub struct LstmWorkspace {
    input: usize,
    hidden: usize,
    max_steps: usize,
    max_rows: usize,
    steps: usize,
    rows: usize,
    /// The inputs, `steps x rows x input`.
    x: Vec<f32>,
    /// Activated gates `i, f, g, o` per step and row.
    gates: Vec<f32>,
    /// Gradients of the gates' pre-activations.
    dgates: Vec<f32>,
    /// `h` and `c` entering each step (after resets).
    h_in: Vec<f32>,
    c_in: Vec<f32>,
    /// `tanh(c')` of each step.
    tanh_c: Vec<f32>,
    /// The outputs `h'` of each step.
    h_out: Vec<f32>,
    resets: Vec<bool>,
    /// The state after the last step (carried into the next `Module::forward`).
    h: Vec<f32>,
    c: Vec<f32>,
    /// Backward scratch: the gradients flowing into the previous step.
    dh: Vec<f32>,
    dc: Vec<f32>,
    dh_in: Vec<f32>,
    /// `W_hh^T` packed for the forward pass's steps, and `W_hh` for the backward's.
    w_hh_t: WeightPack,
    w_hh: WeightPack,
}

impl LstmWorkspace {
    /// The outputs of the last pass, `steps x rows x hidden`.
    pub fn output(&self) -> &[f32] {
        &self.h_out[..self.steps * self.rows * self.hidden]
    }

    /// `h` after the last step of the last pass, `rows x hidden`.
    pub fn final_h(&self) -> &[f32] {
        &self.h[..self.rows * self.hidden]
    }

    /// `c` after the last step of the last pass, `rows x hidden`.
    pub fn final_c(&self) -> &[f32] {
        &self.c[..self.rows * self.hidden]
    }

    /// Zeroes the carried state of row `row` (of `max_rows`): the next [`Module`]
    /// forward starts it from zero.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a row past the last; nothing changes then.
    pub fn reset_row(&mut self, row: usize) -> Result<()> {
        reset(&mut self.h, &mut self.c, self.hidden, row, self.max_rows)
    }

    /// Steps of the last pass.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Rows of the last pass.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Longest window.
    pub fn max_steps(&self) -> usize {
        self.max_steps
    }

    /// Most sequences.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Bytes held by its buffers ([`Lstm::sequence_workspace_bytes`] of its cell).
    pub fn memory_bytes(&self) -> u64 {
        let floats = [
            &self.x,
            &self.gates,
            &self.dgates,
            &self.h_in,
            &self.c_in,
            &self.tanh_c,
            &self.h_out,
            &self.h,
            &self.c,
            &self.dh,
            &self.dc,
            &self.dh_in,
        ]
        .iter()
        .map(|v| v.len())
        .sum::<usize>();
        (floats * size_of::<f32>() + self.resets.len()) as u64
            + self.w_hh_t.memory_bytes()
            + self.w_hh.memory_bytes()
    }
}

#[cfg(test)]
mod tests;
