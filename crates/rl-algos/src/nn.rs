//! Dense ReLU networks with explicit backward passes over flat parameters, for SAC.
//!
//! SAC makes about sixteen `256 x 256` matrix products per environment step, so its speed
//! is the speed of its matrix products and of what sits between them. dfdx 0.13 runs the
//! products on the same `gemm` crate used here, but adds about 1 ms of allocation, tape and
//! broadcasting work around a `4-256-256-1` forward and backward at batch 256 (2.46 ms
//! against 1.4 ms of products, measured on this machine): that overhead alone puts a dfdx
//! SAC at Stable-Baselines3's speed. Here the layers own flat `f32` parameters, every
//! activation lives in a [`Workspace`] allocated once for the largest batch, and the
//! backward pass is written out (bias and ReLU fused into one sweep), so an update
//! keeps no memory and costs little beyond its products.
//!
//! Layout follows PyTorch and dfdx: a layer's weight is `out x in` row-major, its bias
//! `out`; a network's tensors are stored weight then bias, layer after layer, in one
//! vector (so [`crate::Checkpoint`]s and optimiser moments see a list of tensors).

#![allow(
    unsafe_code,
    reason = "one call into gemm's raw-pointer API, bounds-checked by its safe wrapper"
)]

use rand::Rng;
use rl_core::{Location, MemoryPlan};

use crate::error::{Error, Result};

/// A read-only strided matrix view: element `(i, j)` is `data[i * row_stride + j * col_stride]`.
#[derive(Clone, Copy)]
struct View<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> View<'a> {
    /// A row-major `rows x cols` matrix.
    fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose of a row-major `cols x rows` matrix, without copying.
    fn transposed(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: 1,
            col_stride: rows,
        }
    }

    /// Whether every element lies inside `data`.
    fn in_bounds(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                < self.data.len()
    }
}

/// `dst (m x n, row-major) = lhs (m x k) * rhs (k x n)`, or `+=` when `accumulate`, on
/// one thread.
///
/// # Panics
/// If a view does not match the shapes or leaves its slice: callers pass shapes they
/// computed themselves, so this is a bug check, never a user error.
fn matmul(dst: &mut [f32], lhs: View<'_>, rhs: View<'_>, accumulate: bool) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert!(
        rhs.rows == k && dst.len() == m * n && lhs.in_bounds() && rhs.in_bounds(),
        "matmul shapes: dst {} for {m}x{k} * {}x{n}",
        dst.len(),
        rhs.rows
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst.fill(0.0);
        }
        return;
    }
    // SAFETY: the assert above checks that every element gemm reads ((m-1, k-1) of lhs,
    // (k-1, n-1) of rhs at their strides) lies inside its slice and that dst holds exactly
    // m x n row-major elements; the slices are borrowed for the whole call, dst mutably
    // and exclusively, so nothing aliases it. All strides fit in isize because the
    // indices they produce fit in the slices' lengths.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Where one layer's tensors sit in the flat parameter vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LayerShape {
    inputs: usize,
    outputs: usize,
    /// Offset of the weight (`outputs x inputs`); the bias follows it.
    offset: usize,
}

impl LayerShape {
    fn weight(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.inputs * self.outputs
    }

    fn bias(&self) -> std::ops::Range<usize> {
        let start = self.offset + self.inputs * self.outputs;
        start..start + self.outputs
    }
}

/// A fully connected network `sizes[0] -> sizes[1] -> ... -> sizes[last]` with ReLU after
/// every layer but the last, on flat parameters.
///
/// Initialisation is PyTorch's default for `nn.Linear` (and dfdx's): weights and biases
/// uniform in `[-1/sqrt(fan_in), 1/sqrt(fan_in)]`.
///
/// ```
/// use rl_algos::{DenseMlp, Workspace};
/// use rand::SeedableRng;
///
/// # fn main() -> rl_algos::Result<()> {
/// let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
/// let net = DenseMlp::new(&[3, 16, 16, 2], &mut rng)?;
/// let mut ws = Workspace::new(&net, 4);
/// let out = net.forward(&[0.5; 12], 4, &mut ws)?;
/// assert_eq!(out.len(), 8);
///
/// // Gradients of sum(out) with respect to every parameter (accumulated into `grads`).
/// let mut grads = vec![0.0; net.num_params()];
/// net.backward(&mut ws, &[1.0; 8], Some(&mut grads), None)?;
/// assert!(grads.iter().any(|&g| g != 0.0));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct DenseMlp {
    layers: Vec<LayerShape>,
    params: Vec<f32>,
}

impl DenseMlp {
    /// A network with the given layer widths (at least an input and an output width, all
    /// positive), initialised from `rng`.
    ///
    /// # Errors
    /// [`Error::Config`] for fewer than two sizes or a zero width.
    pub fn new<R: Rng + ?Sized>(sizes: &[usize], rng: &mut R) -> Result<Self> {
        if sizes.len() < 2 || sizes.contains(&0) {
            return Err(Error::config(
                "network sizes",
                format!(
                    "are {sizes:?}: give an input width, any hidden widths and an output width, all at least 1"
                ),
            ));
        }
        let mut layers = Vec::with_capacity(sizes.len() - 1);
        let mut offset = 0;
        for pair in sizes.windows(2) {
            let (inputs, outputs) = (pair[0], pair[1]);
            layers.push(LayerShape {
                inputs,
                outputs,
                offset,
            });
            offset += (inputs + 1) * outputs;
        }
        let mut params = vec![0.0; offset];
        for layer in &layers {
            let bound = 1.0 / (layer.inputs as f32).sqrt();
            for p in &mut params[layer.offset..layer.bias().end] {
                *p = rng.random_range(-bound..=bound);
            }
        }
        Ok(Self { layers, params })
    }

    /// Input width.
    pub fn input_dim(&self) -> usize {
        self.layers[0].inputs
    }

    /// Output width.
    pub fn output_dim(&self) -> usize {
        self.layers[self.layers.len() - 1].outputs
    }

    /// Layer widths, input first.
    pub fn sizes(&self) -> Vec<usize> {
        let mut sizes: Vec<usize> = self.layers.iter().map(|l| l.inputs).collect();
        sizes.push(self.output_dim());
        sizes
    }

    /// Number of parameters.
    pub fn num_params(&self) -> usize {
        self.params.len()
    }

    /// All parameters, layer after layer, each weight (`out x in`) before its bias.
    pub fn params(&self) -> &[f32] {
        &self.params
    }

    /// All parameters, mutably (same layout as [`DenseMlp::params`]).
    pub fn params_mut(&mut self) -> &mut [f32] {
        &mut self.params
    }

    /// The lengths of the tensors in [`DenseMlp::params`], in order (weight, bias, ...).
    pub fn tensor_lengths(&self) -> Vec<usize> {
        self.layers
            .iter()
            .flat_map(|l| [l.inputs * l.outputs, l.outputs])
            .collect()
    }

    /// The shapes of the tensors in [`DenseMlp::params`] (`[out, in]`, `[out]`, ...).
    pub fn tensor_shapes(&self) -> Vec<Vec<usize>> {
        self.layers
            .iter()
            .flat_map(|l| [vec![l.outputs, l.inputs], vec![l.outputs]])
            .collect()
    }

    /// Multiplies the last layer's weights by `scale` and zeroes its bias (small-head
    /// initialisation).
    pub fn scale_output_layer(&mut self, scale: f32) {
        let last = self.layers[self.layers.len() - 1];
        for w in &mut self.params[last.weight()] {
            *w *= scale;
        }
        self.params[last.bias()].fill(0.0);
    }

    /// Polyak averaging towards `online`: `self = (1 - tau) self + tau online`.
    ///
    /// # Errors
    /// [`Error::Config`] if the networks differ in shape or `tau` is outside `[0, 1]`.
    pub fn polyak_from(&mut self, online: &DenseMlp, tau: f32) -> Result<()> {
        if self.layers != online.layers {
            return Err(Error::config(
                "polyak update",
                format!(
                    "mixes networks of sizes {:?} and {:?}: a target must copy its online network",
                    self.sizes(),
                    online.sizes()
                ),
            ));
        }
        if !(0.0..=1.0).contains(&tau) {
            return Err(Error::config(
                "tau",
                format!("is {tau}: use a coefficient in [0, 1] (0.005 is usual)"),
            ));
        }
        for (t, &o) in self.params.iter_mut().zip(&online.params) {
            *t += tau * (o - *t);
        }
        Ok(())
    }

    /// The forward pass over `rows` inputs (`rows x input_dim`, row-major); returns the
    /// `rows x output_dim` outputs, which live in `ws` until its next forward pass.
    /// `ws` keeps what [`DenseMlp::backward`] needs.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `input` is not `rows x input_dim` or `rows` exceeds the
    /// workspace's capacity; [`Error::Config`] if `ws` was made for another network.
    pub fn forward<'w>(
        &self,
        input: &[f32],
        rows: usize,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32]> {
        ws.check(self, rows)?;
        if input.len() != rows * self.input_dim() {
            return Err(Error::shape(
                "network input (rows x input width)",
                rows * self.input_dim(),
                input.len(),
            ));
        }
        ws.rows = rows;
        ws.activations[0][..input.len()].copy_from_slice(input);
        let last = self.layers.len() - 1;
        for (l, layer) in self.layers.iter().enumerate() {
            let (done, rest) = ws.activations.split_at_mut(l + 1);
            let x = &done[l][..rows * layer.inputs];
            let y = &mut rest[0][..rows * layer.outputs];
            let bias = &self.params[layer.bias()];
            for row in y.chunks_exact_mut(layer.outputs) {
                row.copy_from_slice(bias);
            }
            matmul(
                y,
                View::row_major(x, rows, layer.inputs),
                View::transposed(&self.params[layer.weight()], layer.inputs, layer.outputs),
                true,
            );
            if l < last {
                for v in y.iter_mut() {
                    *v = v.max(0.0);
                }
            }
        }
        Ok(&ws.activations[last + 1][..rows * self.output_dim()])
    }

    /// The backward pass of the last [`DenseMlp::forward`] through `ws`, given the
    /// gradient of the loss with respect to the outputs (`rows x output_dim`). Adds the
    /// parameter gradients into `param_grads` (if given, [`DenseMlp::num_params`] long)
    /// and writes the gradient with respect to the inputs into `input_grads` (if given,
    /// `rows x input_dim`).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length; [`Error::Config`] for a
    /// workspace of another network.
    pub fn backward(
        &self,
        ws: &mut Workspace,
        output_grads: &[f32],
        mut param_grads: Option<&mut [f32]>,
        input_grads: Option<&mut [f32]>,
    ) -> Result<()> {
        ws.check(self, ws.rows)?;
        let rows = ws.rows;
        if output_grads.len() != rows * self.output_dim() {
            return Err(Error::shape(
                "output gradients (rows x output width)",
                rows * self.output_dim(),
                output_grads.len(),
            ));
        }
        if let Some(g) = &param_grads
            && g.len() != self.params.len()
        {
            return Err(Error::shape(
                "parameter gradients",
                self.params.len(),
                g.len(),
            ));
        }
        if let Some(g) = &input_grads
            && g.len() != rows * self.input_dim()
        {
            return Err(Error::shape(
                "input gradients (rows x input width)",
                rows * self.input_dim(),
                g.len(),
            ));
        }
        let Workspace {
            activations,
            delta,
            next_delta,
            ..
        } = ws;
        delta[..output_grads.len()].copy_from_slice(output_grads);
        for (l, layer) in self.layers.iter().enumerate().rev() {
            let dy = &delta[..rows * layer.outputs];
            let x = &activations[l][..rows * layer.inputs];
            if let Some(grads) = param_grads.as_deref_mut() {
                // dW += dy^T x (out x in), db += column sums of dy.
                matmul(
                    &mut grads[layer.weight()],
                    View::transposed(dy, layer.outputs, rows),
                    View::row_major(x, rows, layer.inputs),
                    true,
                );
                let db = &mut grads[layer.bias()];
                for row in dy.chunks_exact(layer.outputs) {
                    for (b, &g) in db.iter_mut().zip(row) {
                        *b += g;
                    }
                }
            }
            if l == 0 {
                if let Some(dx) = input_grads {
                    matmul(
                        dx,
                        View::row_major(dy, rows, layer.outputs),
                        View::row_major(&self.params[layer.weight()], layer.outputs, layer.inputs),
                        false,
                    );
                }
                break;
            }
            // dx = dy W, then through the ReLU that produced x (x > 0 where it passed).
            let dx = &mut next_delta[..rows * layer.inputs];
            matmul(
                dx,
                View::row_major(dy, rows, layer.outputs),
                View::row_major(&self.params[layer.weight()], layer.outputs, layer.inputs),
                false,
            );
            // A select, not a branch, so that the loop vectorises.
            for (d, &a) in dx.iter_mut().zip(x) {
                *d = if a > 0.0 { *d } else { 0.0 };
            }
            std::mem::swap(delta, next_delta);
        }
        Ok(())
    }
}

/// Activations and gradient scratch of one [`DenseMlp`] for batches of up to
/// `max_rows` rows, allocated once: forward and backward passes keep no memory (gemm's
/// packing takes a few KiB of short-lived scratch per product).
#[derive(Clone, Debug)]
pub struct Workspace {
    sizes: Vec<usize>,
    max_rows: usize,
    rows: usize,
    /// `activations[0]` is the input copy, `activations[l + 1]` the output of layer `l`.
    activations: Vec<Vec<f32>>,
    delta: Vec<f32>,
    next_delta: Vec<f32>,
}

impl Workspace {
    /// Scratch for `net` and batches of up to `max_rows` rows.
    pub fn new(net: &DenseMlp, max_rows: usize) -> Self {
        let sizes = net.sizes();
        let widest = sizes.iter().copied().max().unwrap_or(0);
        Self {
            activations: sizes.iter().map(|&w| vec![0.0; w * max_rows]).collect(),
            delta: vec![0.0; widest * max_rows],
            next_delta: vec![0.0; widest * max_rows],
            sizes,
            max_rows,
            rows: 0,
        }
    }

    /// The outputs of the last forward pass (`rows x output width`).
    pub fn output(&self) -> &[f32] {
        let width = self.sizes.last().copied().unwrap_or(0);
        self.activations
            .last()
            .map_or(&[][..], |a| &a[..self.rows * width])
    }

    /// Largest batch.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// What the workspace holds: one activation buffer per layer plus two gradient
    /// buffers of the widest layer, each for `max_rows` rows.
    pub fn memory_plan(&self, name: &str) -> MemoryPlan {
        let floats: usize = self.activations.iter().map(Vec::len).sum::<usize>()
            + self.delta.len()
            + self.next_delta.len();
        MemoryPlan::new().with(
            format!("{name}/activations and gradients"),
            Location::Ram,
            (floats * size_of::<f32>()) as u64,
        )
    }

    fn check(&self, net: &DenseMlp, rows: usize) -> Result<()> {
        if self.sizes.len() != net.layers.len() + 1
            || self.sizes[..net.layers.len()]
                .iter()
                .zip(&net.layers)
                .any(|(&s, l)| s != l.inputs)
            || self.sizes.last() != Some(&net.output_dim())
        {
            return Err(Error::config(
                "workspace",
                format!(
                    "was made for a network of sizes {:?}, used with {:?}: make one per network",
                    self.sizes,
                    net.sizes()
                ),
            ));
        }
        if rows > self.max_rows {
            return Err(Error::shape(
                "batch rows (at most the workspace's max_rows)",
                self.max_rows,
                rows,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    fn naive_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        out
    }

    #[test]
    fn matmul_matches_naive_for_every_layout() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        for (m, k, n) in [(1, 1, 1), (3, 5, 7), (17, 33, 9), (64, 3, 256)] {
            let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let want = naive_matmul(&a, &b, m, k, n);
            let mut got = vec![0.0; m * n];
            matmul(
                &mut got,
                View::row_major(&a, m, k),
                View::row_major(&b, k, n),
                false,
            );
            // Transposed views of transposed copies give the same product.
            let at: Vec<f32> = (0..k * m).map(|x| a[(x % m) * k + x / m]).collect();
            let bt: Vec<f32> = (0..n * k).map(|x| b[(x % k) * n + x / k]).collect();
            let mut got_t = vec![1.0; m * n];
            matmul(
                &mut got_t,
                View::transposed(&at, m, k),
                View::transposed(&bt, k, n),
                true,
            );
            for ((w, g), gt) in want.iter().zip(&got).zip(&got_t) {
                assert!((w - g).abs() < 1e-4, "{w} vs {g}");
                assert!((w + 1.0 - gt).abs() < 1e-4, "accumulate: {w} + 1 vs {gt}");
            }
        }
    }

    /// Loss `sum(out * weights)` for a fixed weighting, in f64 through the same layers.
    fn loss(net: &DenseMlp, input: &[f32], rows: usize, weights: &[f32]) -> f64 {
        let mut ws = Workspace::new(net, rows);
        let out = net.forward(input, rows, &mut ws).unwrap();
        out.iter()
            .zip(weights)
            .map(|(&o, &w)| f64::from(o) * f64::from(w))
            .sum()
    }

    #[test]
    #[allow(clippy::needless_range_loop, reason = "perturbs parameters by index")]
    fn gradients_match_finite_differences() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let mut net = DenseMlp::new(&[4, 6, 5, 3], &mut rng).unwrap();
        let rows = 5;
        let input: Vec<f32> = (0..rows * 4).map(|_| rng.random_range(-1.0..1.0)).collect();
        let weights: Vec<f32> = (0..rows * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut ws = Workspace::new(&net, 8);
        net.forward(&input, rows, &mut ws).unwrap();
        let mut grads = vec![0.0; net.num_params()];
        let mut input_grads = vec![0.0; rows * 4];
        net.backward(&mut ws, &weights, Some(&mut grads), Some(&mut input_grads))
            .unwrap();

        let h = 1e-2f32;
        let mut checked = 0;
        for i in 0..net.num_params() {
            let original = net.params[i];
            net.params[i] = original + h;
            let up = loss(&net, &input, rows, &weights);
            net.params[i] = original - h;
            let down = loss(&net, &input, rows, &weights);
            net.params[i] = original;
            let numeric = (up - down) / (2.0 * f64::from(h));
            // ReLU kinks make finite differences wrong where a unit sits near 0.
            if (numeric - f64::from(grads[i])).abs() > 1e-3 {
                let near_kink = (up + down - 2.0 * loss(&net, &input, rows, &weights)).abs() > 1e-6;
                assert!(
                    near_kink,
                    "param {i}: analytic {} vs numeric {numeric}",
                    grads[i]
                );
            } else {
                checked += 1;
            }
        }
        assert!(
            checked > net.num_params() * 9 / 10,
            "only {checked} checked"
        );
        let mut x = input.clone();
        for i in 0..x.len() {
            let original = x[i];
            x[i] = original + h;
            let up = loss(&net, &x, rows, &weights);
            x[i] = original - h;
            let down = loss(&net, &x, rows, &weights);
            x[i] = original;
            let numeric = (up - down) / (2.0 * f64::from(h));
            assert!(
                (numeric - f64::from(input_grads[i])).abs() < 2e-3,
                "input {i}: analytic {} vs numeric {numeric}",
                input_grads[i]
            );
        }
    }

    #[test]
    fn gradients_accumulate_and_passes_keep_no_memory() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        let net = DenseMlp::new(&[3, 32, 32, 1], &mut rng).unwrap();
        let mut ws = Workspace::new(&net, 16);
        let input = vec![0.3; 16 * 3];
        let mut once = vec![0.0; net.num_params()];
        net.forward(&input, 16, &mut ws).unwrap();
        net.backward(&mut ws, &[1.0; 16], Some(&mut once), None)
            .unwrap();
        let mut twice = vec![0.0; net.num_params()];
        let ((), stats) = rl_testkit::measure(|| {
            for _ in 0..2 {
                net.forward(&input, 16, &mut ws).unwrap();
                net.backward(&mut ws, &[1.0; 16], Some(&mut twice), None)
                    .unwrap();
            }
        });
        // gemm packs small operands into short-lived scratch; nothing may outlive a pass
        // and the transient stays far below the workspace itself.
        assert_eq!(stats.allocated_bytes, stats.freed_bytes, "{stats:?}");
        assert!(stats.peak_live_bytes < 16 * 1024, "{stats:?}");
        for (a, b) in once.iter().zip(&twice) {
            assert!((2.0 * a - b).abs() <= 1e-5 * a.abs().max(1.0));
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        assert!(DenseMlp::new(&[3], &mut rng).is_err());
        assert!(DenseMlp::new(&[3, 0, 1], &mut rng).is_err());
        let net = DenseMlp::new(&[3, 4, 1], &mut rng).unwrap();
        let other = DenseMlp::new(&[3, 5, 1], &mut rng).unwrap();
        let mut ws = Workspace::new(&net, 2);
        assert!(
            net.forward(&[0.0; 9], 3, &mut ws).is_err(),
            "rows > max_rows"
        );
        assert!(net.forward(&[0.0; 5], 2, &mut ws).is_err(), "ragged input");
        assert!(
            other.forward(&[0.0; 6], 2, &mut ws).is_err(),
            "other network"
        );
        net.forward(&[0.0; 6], 2, &mut ws).unwrap();
        assert!(net.backward(&mut ws, &[0.0; 3], None, None).is_err());
        let mut target = net.clone();
        assert!(target.polyak_from(&other, 0.5).is_err());
        assert!(target.polyak_from(&net, 1.5).is_err());
    }

    #[test]
    fn polyak_moves_a_fraction_of_the_way() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
        let online = DenseMlp::new(&[2, 3, 1], &mut rng).unwrap();
        let mut target = DenseMlp::new(&[2, 3, 1], &mut rng).unwrap();
        let before = target.params.clone();
        target.polyak_from(&online, 0.25).unwrap();
        for ((t, b), o) in target.params.iter().zip(&before).zip(&online.params) {
            assert!((t - (0.75 * b + 0.25 * o)).abs() < 1e-6);
        }
        target.polyak_from(&online, 1.0).unwrap();
        assert_eq!(target.params, online.params);
    }
}
