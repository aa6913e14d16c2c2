//! Fully connected layers and multilayer perceptrons on flat parameters.
//!
//! Layout follows PyTorch: a layer's weight is `out x in` row-major, its bias `out`; an
//! MLP's tensors are stored weight then bias, layer after layer, in one vector, and named
//! as in the equivalent `nn.Sequential` (`0.weight`, `0.bias`, `2.weight` ..., the odd
//! indices being the activations), so exported weights load into PyTorch by name.

use std::sync::Arc;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, check_len};
use crate::init::fill_layer;
use crate::linalg::{Accumulate, MatRef, WeightPack, matmul, matmul_on};
use crate::pool::Pool;
use crate::version::Version;
use crate::{Activation, Architecture, Init, Module, TensorSpec, Weights};

/// One fully connected layer `y = x W^T + b` inside a flat parameter vector: its shape
/// and where its weight (`outputs x inputs`, row-major) and bias (`outputs`) sit.
///
/// It holds no parameters itself: the passes take the parameter slice, so networks made
/// of several layers (an [`Mlp`], a recurrent cell) keep all of theirs in one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    inputs: usize,
    outputs: usize,
    offset: usize,
}

impl Linear {
    /// A layer of `inputs -> outputs` whose weight starts at `offset` in the parameters.
    pub const fn new(inputs: usize, outputs: usize, offset: usize) -> Self {
        Self {
            inputs,
            outputs,
            offset,
        }
    }

    /// Input width.
    pub const fn inputs(&self) -> usize {
        self.inputs
    }

    /// Output width.
    pub const fn outputs(&self) -> usize {
        self.outputs
    }

    /// Parameters: `(inputs + 1) * outputs`.
    pub const fn num_params(&self) -> usize {
        (self.inputs + 1) * self.outputs
    }

    /// The weight's range in the parameters.
    pub const fn weight(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.inputs * self.outputs
    }

    /// The bias's range in the parameters.
    pub const fn bias(&self) -> std::ops::Range<usize> {
        let start = self.offset + self.inputs * self.outputs;
        start..start + self.outputs
    }

    /// `y = x W^T + b` for `rows` rows (`x` is `rows x inputs`, `y` is `rows x outputs`).
    ///
    /// # Panics
    /// If a slice is shorter than the shapes say (a bug in the calling network).
    pub fn forward(&self, params: &[f32], x: &[f32], rows: usize, y: &mut [f32]) {
        self.forward_activated(params, x, rows, y, None);
    }

    /// `y = act(x W^T + b)`: the product, then the bias and the activation (if any) in
    /// one sweep over `y`.
    ///
    /// # Panics
    /// If a slice is shorter than the shapes say (a bug in the calling network).
    pub fn forward_activated(
        &self,
        params: &[f32],
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        activation: Option<Activation>,
    ) {
        self.forward_on(None, params, x, rows, y, activation);
    }

    /// [`Linear::forward_activated`], its product on `pool` if one is given.
    pub(crate) fn forward_on(
        &self,
        pool: Option<&Pool>,
        params: &[f32],
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        activation: Option<Activation>,
    ) {
        self.forward_with(params, x, rows, y, activation, |y, x, w| {
            product(pool, y, x, w, Accumulate::Overwrite);
        });
    }

    /// [`Linear::forward_on`] with the packed `W^T` kept in `pack` and reused while the
    /// parameters stay at `version` (bit-identical to packing it every time).
    pub(crate) fn forward_reusing(
        &self,
        pool: Option<&Pool>,
        (pack, version): (&mut WeightPack, Version),
        params: &[f32],
        (x, rows): (&[f32], usize),
        y: &mut [f32],
        activation: Option<Activation>,
    ) {
        self.forward_with(params, x, rows, y, activation, |y, x, w| {
            pack.matmul(pool, version.get(), y, x, w, Accumulate::Overwrite);
        });
    }

    /// The pass of [`Linear::forward_on`] with `product(y, x, W^T)` writing the product.
    fn forward_with(
        &self,
        params: &[f32],
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        activation: Option<Activation>,
        product: impl FnOnce(&mut [f32], MatRef<'_>, MatRef<'_>),
    ) {
        let y = &mut y[..rows * self.outputs];
        product(
            y,
            MatRef::row_major(&x[..rows * self.inputs], rows, self.inputs),
            MatRef::transposed(&params[self.weight()], self.inputs, self.outputs),
        );
        let bias = &params[self.bias()];
        match activation {
            None => y.chunks_exact_mut(self.outputs).for_each(|row| {
                row.iter_mut().zip(bias).for_each(|(v, &b)| *v += b);
            }),
            Some(activation) => y
                .chunks_exact_mut(self.outputs)
                .for_each(|row| activation.apply_with_bias(row, bias)),
        }
    }

    /// Adds the parameter gradients of a pass with inputs `x` and output gradients `dy`
    /// into `grads` (laid out as the parameters): `dW += dy^T x`, `db += sum_rows dy`.
    ///
    /// # Panics
    /// If a slice is shorter than the shapes say (a bug in the calling network).
    pub fn backward_params(&self, x: &[f32], dy: &[f32], rows: usize, grads: &mut [f32]) {
        self.backward_params_on(None, x, dy, rows, grads);
    }

    /// [`Linear::backward_params`], its product on `pool` if one is given.
    pub(crate) fn backward_params_on(
        &self,
        pool: Option<&Pool>,
        x: &[f32],
        dy: &[f32],
        rows: usize,
        grads: &mut [f32],
    ) {
        let dy = &dy[..rows * self.outputs];
        product(
            pool,
            &mut grads[self.weight()],
            MatRef::transposed(dy, self.outputs, rows),
            MatRef::row_major(&x[..rows * self.inputs], rows, self.inputs),
            Accumulate::Add,
        );
        let db = &mut grads[self.bias()];
        for row in dy.chunks_exact(self.outputs) {
            for (b, &g) in db.iter_mut().zip(row) {
                *b += g;
            }
        }
    }

    /// Writes (or with [`Accumulate::Add`] adds) the input gradients `dx = dy W`.
    ///
    /// # Panics
    /// If a slice is shorter than the shapes say (a bug in the calling network).
    pub fn backward_input(
        &self,
        params: &[f32],
        dy: &[f32],
        rows: usize,
        dx: &mut [f32],
        accumulate: Accumulate,
    ) {
        self.backward_input_on(None, params, dy, rows, dx, accumulate);
    }

    /// [`Linear::backward_input`], its product on `pool` if one is given.
    pub(crate) fn backward_input_on(
        &self,
        pool: Option<&Pool>,
        params: &[f32],
        dy: &[f32],
        rows: usize,
        dx: &mut [f32],
        accumulate: Accumulate,
    ) {
        product(
            pool,
            &mut dx[..rows * self.inputs],
            MatRef::row_major(&dy[..rows * self.outputs], rows, self.outputs),
            MatRef::row_major(&params[self.weight()], self.outputs, self.inputs),
            accumulate,
        );
    }
}

/// Bytes of the packs a workspace keeps for layers of these `(inputs, outputs)`
/// ([`WeightPack::for_operand`] of each layer that takes panels); `None` on overflow.
pub(crate) fn packs_bytes(layers: impl Iterator<Item = (usize, usize)>) -> Option<usize> {
    layers
        .filter(|&(k, n)| WeightPack::packs_layer(k, n))
        .try_fold(0usize, |sum, (k, n)| {
            sum.checked_add(WeightPack::bytes(k, n)?)
        })
}

/// A pack for each layer: room for its `W^T` where it takes panels, else empty.
pub(crate) fn layer_packs(layers: &[Linear]) -> Vec<WeightPack> {
    layers
        .iter()
        .map(|l| {
            if WeightPack::packs_layer(l.inputs, l.outputs) {
                WeightPack::for_operand(l.inputs, l.outputs)
            } else {
                WeightPack::empty()
            }
        })
        .collect()
}

/// [`matmul_on`] on `pool`, or [`matmul`] on the calling thread.
pub(crate) fn product(
    pool: Option<&Pool>,
    dst: &mut [f32],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    accumulate: Accumulate,
) {
    match pool {
        Some(pool) => matmul_on(pool, dst, lhs, rhs, accumulate),
        None => matmul(dst, lhs, rhs, accumulate),
    }
}

/// What an [`Mlp`] is: layer widths (input first) and the nonlinearity between layers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MlpSpec {
    /// Layer widths, input first, output last; at least two, all positive.
    pub sizes: Vec<usize>,
    /// The nonlinearity after every layer but the last.
    pub activation: Activation,
}

impl MlpSpec {
    /// `input -> hidden... -> output` with `activation`.
    pub fn new(input: usize, hidden: &[usize], output: usize, activation: Activation) -> Self {
        let mut sizes = Vec::with_capacity(hidden.len() + 2);
        sizes.push(input);
        sizes.extend_from_slice(hidden);
        sizes.push(output);
        Self { sizes, activation }
    }

    /// Checks the widths.
    ///
    /// # Errors
    /// [`Error::Config`] for fewer than two widths or a zero width.
    pub fn validate(&self) -> Result<()> {
        if self.sizes.len() < 2 || self.sizes.contains(&0) {
            return Err(Error::config(
                "network sizes",
                format!(
                    "are {:?}: give an input width, any hidden widths and an output width, all at least 1",
                    self.sizes
                ),
            ));
        }
        Ok(())
    }

    /// Parameters of a network of this spec.
    ///
    /// # Panics
    /// In debug builds, if the count overflows `usize` (use
    /// [`MlpSpec::checked_num_params`] for sizes not known to fit).
    pub fn num_params(&self) -> usize {
        self.sizes.windows(2).map(|p| (p[0] + 1) * p[1]).sum()
    }

    /// Parameters of a network of this spec, from the widths alone; `None` if the count
    /// or its bytes overflow (what a plan reports as a configuration error before
    /// anything is allocated).
    pub fn checked_num_params(&self) -> Option<usize> {
        self.sizes
            .windows(2)
            .try_fold(0usize, |sum, p| {
                p[0].checked_add(1)?
                    .checked_mul(p[1])
                    .and_then(|n| sum.checked_add(n))
            })
            .filter(|n| n.checked_mul(size_of::<f32>()).is_some())
    }

    /// Bytes of a workspace for `max_rows` rows ([`Module::workspace_bytes`] of a
    /// network of this spec), from the widths alone; `None` on overflow.
    pub fn workspace_bytes(&self, max_rows: usize) -> Option<u64> {
        let widest = self.sizes.iter().copied().max().unwrap_or(0);
        let floats = self
            .sizes
            .iter()
            .try_fold(0usize, |sum, &w| sum.checked_add(w))?
            .checked_add(widest.checked_mul(2)?)?
            .checked_mul(max_rows)?;
        let packs = packs_bytes(self.sizes.windows(2).map(|p| (p[0], p[1])))?;
        u64::try_from(floats.checked_mul(size_of::<f32>())?.checked_add(packs)?).ok()
    }
}

/// A fully connected network `sizes[0] -> ... -> sizes[last]` with an [`Activation`]
/// after every layer but the last, on flat parameters, with sizes chosen at run time.
///
/// ```
/// use rl_nn::{Activation, Init, Mlp, MlpSpec, Module, Weights};
/// use rand::SeedableRng;
///
/// # fn main() -> rl_nn::Result<()> {
/// let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
/// let spec = MlpSpec::new(3, &[16, 16], 2, Activation::Tanh);
/// let net = Mlp::new(spec, Init::Uniform, &mut rng)?;
/// let mut ws = net.workspace(4);
/// let out = net.forward(&[0.5; 12], 4, &mut ws)?;
/// assert_eq!(out.len(), 8);
///
/// // Gradients of sum(out) with respect to every parameter (accumulated into `grads`).
/// let mut grads = vec![0.0; net.num_params()];
/// net.backward(&mut ws, &[1.0; 8], Some(&mut grads), None)?;
/// assert!(grads.iter().any(|&g| g != 0.0));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Mlp {
    spec: MlpSpec,
    layers: Vec<Linear>,
    params: Vec<f32>,
    /// Renewed whenever `params` may change (not part of equality).
    version: Version,
}

impl PartialEq for Mlp {
    fn eq(&self, other: &Self) -> bool {
        (&self.spec, &self.layers, &self.params) == (&other.spec, &other.layers, &other.params)
    }
}

impl Mlp {
    /// A network of `spec`, initialised by `init` from `rng`.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid spec or initialisation.
    pub fn new<R: Rng + ?Sized>(spec: MlpSpec, init: Init, rng: &mut R) -> Result<Self> {
        let mut net = Self::zeros(spec)?;
        init.validate()?;
        let last = net.layers.len() - 1;
        for (l, layer) in net.layers.iter().enumerate() {
            let (w, b) = net.params[layer.offset..layer.bias().end]
                .split_at_mut(layer.inputs * layer.outputs);
            fill_layer(init, l == last, w, b, layer.inputs, rng);
        }
        Ok(net)
    }

    /// A network of `spec` with every parameter 0 (to load weights into).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid spec.
    pub fn zeros(spec: MlpSpec) -> Result<Self> {
        spec.validate()?;
        let mut layers = Vec::with_capacity(spec.sizes.len() - 1);
        let mut offset = 0;
        for pair in spec.sizes.windows(2) {
            let layer = Linear::new(pair[0], pair[1], offset);
            offset += layer.num_params();
            layers.push(layer);
        }
        Ok(Self {
            spec,
            layers,
            params: vec![0.0; offset],
            version: Version::fresh(),
        })
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &MlpSpec {
        &self.spec
    }

    /// Its layers, input first.
    pub fn layers(&self) -> &[Linear] {
        &self.layers
    }

    /// Multiplies the output layer's weights by `scale` and zeroes its bias (a small
    /// policy head starts close to uniform).
    pub fn scale_output_layer(&mut self, scale: f32) {
        self.version = Version::fresh();
        let last = self.layers[self.layers.len() - 1];
        self.params[last.weight()]
            .iter_mut()
            .for_each(|w| *w *= scale);
        self.params[last.bias()].fill(0.0);
    }

    fn check_workspace(&self, ws: &MlpWorkspace, rows: usize) -> Result<()> {
        if ws.spec != self.spec {
            return Err(Error::ArchitectureMismatch {
                what: "workspace".to_owned(),
                expected: self.architecture(),
                found: Architecture::mlp(&ws.spec),
            });
        }
        if rows > ws.max_rows {
            return Err(Error::shape(
                "batch rows (at most the workspace's max_rows)",
                ws.max_rows,
                rows,
            ));
        }
        Ok(())
    }
}

impl Weights for Mlp {
    fn architecture(&self) -> Architecture {
        Architecture::mlp(&self.spec)
    }

    fn params(&self) -> &[f32] {
        &self.params
    }

    fn params_mut(&mut self) -> &mut [f32] {
        self.version = Version::fresh();
        &mut self.params
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(l, layer)| {
                [
                    TensorSpec {
                        name: format!("{}.weight", 2 * l),
                        shape: vec![layer.outputs, layer.inputs],
                        offset: layer.weight().start,
                    },
                    TensorSpec {
                        name: format!("{}.bias", 2 * l),
                        shape: vec![layer.outputs],
                        offset: layer.bias().start,
                    },
                ]
            })
            .collect()
    }
}

impl Module for Mlp {
    type Workspace = MlpWorkspace;

    fn input_dim(&self) -> usize {
        self.spec.sizes[0]
    }

    fn output_dim(&self) -> usize {
        self.spec.sizes[self.spec.sizes.len() - 1]
    }

    fn workspace(&self, max_rows: usize) -> MlpWorkspace {
        let widest = self.spec.sizes.iter().copied().max().unwrap_or(0);
        MlpWorkspace {
            activations: self
                .spec
                .sizes
                .iter()
                .map(|&w| vec![0.0; w * max_rows])
                .collect(),
            delta: vec![0.0; widest * max_rows],
            next_delta: vec![0.0; widest * max_rows],
            packs: layer_packs(&self.layers),
            spec: self.spec.clone(),
            max_rows,
            rows: 0,
            pool: None,
        }
    }

    /// [`MlpSpec::workspace_bytes`], saturating at `u64::MAX` (such a workspace could
    /// not be allocated).
    fn workspace_bytes(&self, max_rows: usize) -> u64 {
        self.spec.workspace_bytes(max_rows).unwrap_or(u64::MAX)
    }

    fn forward<'w>(
        &self,
        input: &[f32],
        rows: usize,
        ws: &'w mut MlpWorkspace,
    ) -> Result<&'w [f32]> {
        self.check_workspace(ws, rows)?;
        check_len(
            "network input (rows x input width)",
            rows * self.input_dim(),
            input.len(),
        )?;
        ws.rows = rows;
        ws.activations[0][..input.len()].copy_from_slice(input);
        let last = self.layers.len() - 1;
        for (l, layer) in self.layers.iter().enumerate() {
            let (done, rest) = ws.activations.split_at_mut(l + 1);
            let y = &mut rest[0][..rows * layer.outputs];
            let activation = (l < last).then_some(self.spec.activation);
            layer.forward_reusing(
                ws.pool.as_deref(),
                (&mut ws.packs[l], self.version),
                &self.params,
                (&done[l], rows),
                y,
                activation,
            );
        }
        Ok(&ws.activations[last + 1][..rows * self.output_dim()])
    }

    fn backward(
        &self,
        ws: &mut MlpWorkspace,
        output_grads: &[f32],
        mut param_grads: Option<&mut [f32]>,
        input_grads: Option<&mut [f32]>,
    ) -> Result<()> {
        self.check_workspace(ws, ws.rows)?;
        let rows = ws.rows;
        crate::error::check_backward(
            rows,
            self.output_dim(),
            output_grads.len(),
            self.params.len(),
            param_grads.as_ref().map(|g| g.len()),
            self.input_dim(),
            input_grads.as_ref().map(|g| g.len()),
            "input gradients (rows x input width)",
        )?;
        let MlpWorkspace {
            activations,
            delta,
            next_delta,
            pool,
            ..
        } = ws;
        let pool = pool.as_deref();
        delta[..output_grads.len()].copy_from_slice(output_grads);
        for (l, layer) in self.layers.iter().enumerate().rev() {
            let dy = &delta[..rows * layer.outputs];
            let x = &activations[l][..rows * layer.inputs];
            if let Some(grads) = param_grads.as_deref_mut() {
                layer.backward_params_on(pool, x, dy, rows, grads);
            }
            if l == 0 {
                if let Some(dx) = input_grads {
                    layer.backward_input_on(
                        pool,
                        &self.params,
                        dy,
                        rows,
                        dx,
                        Accumulate::Overwrite,
                    );
                }
                break;
            }
            // dx = dy W, then through the activation that produced x.
            let dx = &mut next_delta[..rows * layer.inputs];
            layer.backward_input_on(pool, &self.params, dy, rows, dx, Accumulate::Overwrite);
            self.spec.activation.backward(x, dx);
            std::mem::swap(delta, next_delta);
        }
        Ok(())
    }
}

/// Activations and gradient scratch of one [`Mlp`] for batches of up to `max_rows`
/// rows, allocated once ([`Module::workspace`]).
#[derive(Clone, Debug)]
pub struct MlpWorkspace {
    spec: MlpSpec,
    max_rows: usize,
    rows: usize,
    /// `activations[0]` is the input copy, `activations[l + 1]` the output of layer `l`.
    activations: Vec<Vec<f32>>,
    delta: Vec<f32>,
    next_delta: Vec<f32>,
    /// Each layer's packed `W^T`, reused while the network's parameters keep their version.
    packs: Vec<WeightPack>,
    /// Threads the products run on (`None`: the calling thread only).
    pool: Option<Arc<Pool>>,
}

impl MlpWorkspace {
    /// The outputs of the last forward pass (`rows x output width`).
    pub fn output(&self) -> &[f32] {
        let width = self.spec.sizes.last().copied().unwrap_or(0);
        self.activations
            .last()
            .map_or(&[][..], |a| &a[..self.rows * width])
    }

    /// Rows of the last forward pass.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Largest batch.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Runs the passes through this workspace on `pool`'s threads (`None`: on the
    /// calling thread, the default). Results are bit-identical whatever the pool's size
    /// ([`matmul_on`](crate::matmul_on)); only large layers are split (about a million
    /// multiply-adds per product, e.g. 256 x 256 at 16 rows or more).
    pub fn set_pool(&mut self, pool: Option<Arc<Pool>>) {
        self.pool = pool;
    }

    /// The pool the passes run on, if any.
    pub fn pool(&self) -> Option<&Arc<Pool>> {
        self.pool.as_ref()
    }

    /// Bytes held by its buffers ([`Module::workspace_bytes`] of its network).
    pub fn memory_bytes(&self) -> u64 {
        let floats = self.activations.iter().map(Vec::len).sum::<usize>()
            + self.delta.len()
            + self.next_delta.len();
        (floats * size_of::<f32>()) as u64
            + self.packs.iter().map(WeightPack::memory_bytes).sum::<u64>()
    }
}

/// One free trainable tensor (a Gaussian policy's log standard deviations, a learned
/// temperature): [`Weights`] without a forward pass, so optimisers, checkpoints and
/// weight files treat it like a network.
#[derive(Clone, Debug, PartialEq)]
pub struct Parameters {
    shape: Vec<usize>,
    values: Vec<f32>,
}

impl Parameters {
    /// A tensor of `shape` with every element `value`.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty shape or a zero dimension.
    pub fn filled(shape: Vec<usize>, value: f32) -> Result<Self> {
        if shape.is_empty() || shape.contains(&0) {
            return Err(Error::config(
                "parameter shape",
                format!("is {shape:?}: give at least one dimension, all at least 1"),
            ));
        }
        let len = shape.iter().product();
        Ok(Self {
            shape,
            values: vec![value; len],
        })
    }

    /// Its shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
}

impl Weights for Parameters {
    fn architecture(&self) -> Architecture {
        Architecture::Tensor {
            shape: self.shape.clone(),
        }
    }

    fn params(&self) -> &[f32] {
        &self.values
    }

    fn params_mut(&mut self) -> &mut [f32] {
        &mut self.values
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        vec![TensorSpec {
            name: "value".to_owned(),
            shape: self.shape.clone(),
            offset: 0,
        }]
    }
}

#[cfg(test)]
mod tests;
