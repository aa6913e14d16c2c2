//! Two-dimensional convolutions over NCHW `f32` images, as direct kernels.
//!
//! A [`Conv2d`] multiplies the patches its kernel sees (one row per image and output
//! position, one column per input channel and kernel offset, the order of PyTorch's
//! `[out, in, kh, kw]` weight) by the weight's transpose without ever storing them as a
//! matrix (implicit GEMM, `conv/implicit.rs`): each image is staged once, zero-padded and
//! scaled, in the workspace, and a direct kernel reads the patches from it, storing NCHW
//! outputs with the bias and the activation; blocks of whole images run on a [`Pool`]
//! when the workspace has one. The backward pass (`conv/backward.rs`) computes the
//! weight gradient `g patches` with a kernel that reads the patches from the same staged
//! images, and the input gradient with one that adds its tiles straight onto the
//! (padded) input, with no patch-gradient buffer. Every buffer is sized once, in a
//! [`Conv2dWorkspace`], from the spec, the input size and the largest batch.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Activation;
use crate::error::{Error, Result, check_len};
use rl_core::simd::Isa;

use crate::pool::Pool;

mod backward;
mod implicit;
mod transposed;

use implicit::Geometry;

/// What a [`Conv2d`] is, as PyTorch's `nn.Conv2d(in_channels, out_channels,
/// kernel_size, stride, padding)` (no dilation, no groups). Pairs are `[height, width]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Conv2dSpec {
    /// Channels of the input image; at least 1.
    pub in_channels: usize,
    /// Channels of the output image (the number of kernels); at least 1.
    pub out_channels: usize,
    /// Kernel height and width; each at least 1.
    pub kernel: [usize; 2],
    /// Step between kernel positions, vertically and horizontally; each at least 1.
    pub stride: [usize; 2],
    /// Zeros added on each side of the input, vertically and horizontally.
    pub padding: [usize; 2],
}

impl Conv2dSpec {
    /// A convolution `in_channels -> out_channels` with a square `kernel`, a `stride` and
    /// a `padding` equal in both directions.
    pub const fn square(
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Self {
        Self {
            in_channels,
            out_channels,
            kernel: [kernel, kernel],
            stride: [stride, stride],
            padding: [padding, padding],
        }
    }

    /// Checks the spec on its own (no input size).
    ///
    /// # Errors
    /// [`Error::Config`] naming the field: a zero channel count, kernel size or stride,
    /// or a weight whose size overflows.
    pub fn validate(&self) -> Result<()> {
        self.validate_as("conv2d")
    }

    /// [`Conv2dSpec::validate`], naming fields under `name` (`"cnn.convs[1]"`).
    pub(crate) fn validate_as(&self, name: &str) -> Result<()> {
        for (field, value) in [
            ("in_channels", self.in_channels),
            ("out_channels", self.out_channels),
        ] {
            if value == 0 {
                return Err(Error::config(
                    format!("{name}.{field}"),
                    "is 0: give at least 1 channel",
                ));
            }
        }
        for (field, pair) in [("kernel", self.kernel), ("stride", self.stride)] {
            if pair.contains(&0) {
                return Err(Error::config(
                    format!("{name}.{field}"),
                    format!("is {pair:?}: give a height and a width of at least 1"),
                ));
            }
        }
        if self.checked_num_params().is_none() {
            return Err(Error::config(
                format!("{name}.kernel"),
                format!(
                    "is {:?} with {} -> {} channels: the weight's size overflows; use fewer channels or a smaller kernel",
                    self.kernel, self.in_channels, self.out_channels
                ),
            ));
        }
        Ok(())
    }

    /// Output height and width for an input of `input = [height, width]`:
    /// `(input + 2 padding - kernel) / stride + 1` in each direction.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid spec, a zero input size, or a kernel larger than
    /// the padded input.
    pub fn output_size(&self, input: [usize; 2]) -> Result<[usize; 2]> {
        self.output_size_as("conv2d", input)
    }

    /// [`Conv2dSpec::output_size`], naming fields under `name`.
    pub(crate) fn output_size_as(&self, name: &str, input: [usize; 2]) -> Result<[usize; 2]> {
        self.validate_as(name)?;
        if input.contains(&0) {
            return Err(Error::config(
                format!("{name} input size"),
                format!("is {input:?}: give a height and a width of at least 1"),
            ));
        }
        let mut output = [0; 2];
        for d in 0..2 {
            let padded = self.padding[d]
                .checked_mul(2)
                .and_then(|p| p.checked_add(input[d]))
                .ok_or_else(|| {
                    Error::config(
                        format!("{name}.padding"),
                        format!("is {:?}: the padded input overflows", self.padding),
                    )
                })?;
            if self.kernel[d] > padded {
                return Err(Error::config(
                    format!("{name}.kernel"),
                    format!(
                        "is {:?} but the padded input is only {} x {}: use a smaller kernel, more padding or a larger input ({:?} here)",
                        self.kernel,
                        input[0] + 2 * self.padding[0],
                        input[1] + 2 * self.padding[1],
                        input
                    ),
                ));
            }
            output[d] = (padded - self.kernel[d]) / self.stride[d] + 1;
        }
        Ok(output)
    }

    /// Elements of one patch, the weight's fan-in: `in_channels * kh * kw`.
    pub const fn fan_in(&self) -> usize {
        self.in_channels * self.kernel[0] * self.kernel[1]
    }

    /// Parameters: the weight `[out, in, kh, kw]` and the bias `[out]`.
    pub const fn num_params(&self) -> usize {
        (self.fan_in() + 1) * self.out_channels
    }

    /// [`Conv2dSpec::num_params`], `None` if it or its bytes overflow.
    pub fn checked_num_params(&self) -> Option<usize> {
        self.in_channels
            .checked_mul(self.kernel[0])?
            .checked_mul(self.kernel[1])?
            .checked_add(1)?
            .checked_mul(self.out_channels)
            .filter(|n| n.checked_mul(size_of::<f32>()).is_some())
    }
}

/// How a convolution reads its input: as given, or divided by 255 on the way into its
/// patches (images of bytes, read through [`Conv2d::forward_u8`] or
/// [`ConvNet::forward_u8`](crate::ConvNet::forward_u8), are never stored as `f32`
/// images).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputScale {
    /// The input as it is. The default.
    #[default]
    Identity,
    /// Every input value divided by 255 (`x / 255.0` in `f32`): pixel bytes to `[0, 1]`.
    Div255,
}

impl InputScale {
    /// The value a patch holds for input `x`.
    #[inline]
    fn apply(self, x: f32) -> f32 {
        match self {
            Self::Identity => x,
            Self::Div255 => x / 255.0,
        }
    }
}

/// One 2-D convolution over NCHW images of a fixed size, inside a flat parameter vector:
/// its [`Conv2dSpec`], the input and output sizes, where its weight (`[out, in, kh, kw]`
/// row-major, PyTorch's layout) and bias (`[out]`) sit, the activation applied to its
/// outputs and the scaling of its inputs.
///
/// Like [`Linear`](crate::Linear) it holds no parameters: the passes take the parameter
/// slice, so a [`ConvNet`](crate::ConvNet) keeps all of its layers' in one vector.
///
/// ```
/// use rl_nn::{Conv2d, Conv2dSpec};
///
/// # fn main() -> rl_nn::Result<()> {
/// // 2 -> 3 channels, 3x3 kernel, stride 2, padding 1, on 5x5 images.
/// let conv = Conv2d::new(Conv2dSpec::square(2, 3, 3, 2, 1), [5, 5], 0)?;
/// assert_eq!(conv.output_size(), [3, 3]);
/// let params = vec![0.1; conv.num_params()];
/// let mut ws = conv.workspace(4);
/// let y = conv.forward(&params, &[1.0; 4 * 2 * 5 * 5], 4, &mut ws)?;
/// assert_eq!(y.len(), 4 * 3 * 3 * 3);
/// let mut grads = vec![0.0; conv.num_params()];
/// let mut dx = vec![0.0; 4 * 2 * 5 * 5];
/// conv.backward(&params, &mut ws, &[1.0; 4 * 27], Some(&mut grads), Some(&mut dx))?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    spec: Conv2dSpec,
    input: [usize; 2],
    output: [usize; 2],
    offset: usize,
    activation: Option<Activation>,
    input_scale: InputScale,
}

impl Conv2d {
    /// A convolution of `spec` over `input = [height, width]` images whose weight starts
    /// at `offset` in the parameters; no activation, inputs as given.
    ///
    /// # Errors
    /// [`Error::Config`] as [`Conv2dSpec::output_size`].
    pub fn new(spec: Conv2dSpec, input: [usize; 2], offset: usize) -> Result<Self> {
        Self::new_as("conv2d", spec, input, offset)
    }

    /// [`Conv2d::new`], naming fields under `name`.
    pub(crate) fn new_as(
        name: &str,
        spec: Conv2dSpec,
        input: [usize; 2],
        offset: usize,
    ) -> Result<Self> {
        let output = spec.output_size_as(name, input)?;
        let conv = Self {
            spec,
            input,
            output,
            offset,
            activation: None,
            input_scale: InputScale::Identity,
        };
        // Sizes of one image and of the parameters' end must be representable.
        let fits = spec
            .in_channels
            .checked_mul(input[0])
            .and_then(|n| n.checked_mul(input[1]))
            .zip(
                spec.out_channels
                    .checked_mul(output[0])
                    .and_then(|n| n.checked_mul(output[1])),
            )
            .and_then(|_| output[0].checked_mul(output[1])?.checked_mul(spec.fan_in()))
            .and_then(|_| offset.checked_add(spec.num_params()));
        if fits.is_none() {
            return Err(Error::config(
                format!("{name} input size"),
                format!("is {input:?}: the image sizes overflow; use smaller images"),
            ));
        }
        Ok(conv)
    }

    /// The same layer with `activation` applied to its outputs (`None`: linear).
    pub const fn with_activation(mut self, activation: Option<Activation>) -> Self {
        self.activation = activation;
        self
    }

    /// The same layer reading its input through `scale`.
    pub const fn with_input_scale(mut self, scale: InputScale) -> Self {
        self.input_scale = scale;
        self
    }

    /// Its spec.
    pub const fn spec(&self) -> &Conv2dSpec {
        &self.spec
    }

    /// Input height and width.
    pub const fn input_size(&self) -> [usize; 2] {
        self.input
    }

    /// Output height and width.
    pub const fn output_size(&self) -> [usize; 2] {
        self.output
    }

    /// The activation applied to its outputs, if any.
    pub const fn activation(&self) -> Option<Activation> {
        self.activation
    }

    /// How it reads its input.
    pub const fn input_scale(&self) -> InputScale {
        self.input_scale
    }

    /// Elements of one input image: `in_channels * height * width`.
    pub const fn input_len(&self) -> usize {
        self.spec.in_channels * self.input[0] * self.input[1]
    }

    /// Elements of one output image: `out_channels * out_height * out_width`.
    pub const fn output_len(&self) -> usize {
        self.spec.out_channels * self.positions()
    }

    /// Output positions per image: `out_height * out_width`.
    const fn positions(&self) -> usize {
        self.output[0] * self.output[1]
    }

    /// Parameters: [`Conv2dSpec::num_params`].
    pub const fn num_params(&self) -> usize {
        self.spec.num_params()
    }

    /// The weight's range in the parameters.
    pub const fn weight(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.spec.fan_in() * self.spec.out_channels
    }

    /// The bias's range in the parameters.
    pub const fn bias(&self) -> std::ops::Range<usize> {
        let start = self.offset + self.spec.fan_in() * self.spec.out_channels;
        start..start + self.spec.out_channels
    }

    /// Multiply-adds of one forward pass over one image (`positions * fan_in * out`):
    /// the backward pass costs twice that (weight and input gradients).
    pub const fn macs_per_image(&self) -> usize {
        self.positions() * self.spec.fan_in() * self.spec.out_channels
    }

    /// The shapes the kernels need.
    fn geometry(&self) -> Geometry {
        let s = &self.spec;
        Geometry {
            cin: s.in_channels,
            out: s.out_channels,
            kh: s.kernel[0],
            kw: s.kernel[1],
            sh: s.stride[0],
            sw: s.stride[1],
            ph: s.padding[0],
            pw: s.padding[1],
            h: self.input[0],
            w: self.input[1],
            oh: self.output[0],
            ow: self.output[1],
        }
    }

    /// Floats of a workspace for `max_batch` images, buffer by buffer (staged images,
    /// outputs, output gradients, input-gradient scratch, weight panels); `None` on
    /// overflow.
    fn workspace_floats(&self, max_batch: usize) -> Option<[usize; 5]> {
        let g = self.geometry();
        let staged = (g.h + 2 * g.ph)
            .checked_mul(g.w + 2 * g.pw)?
            .checked_mul(g.cin)?
            .checked_mul(max_batch)?;
        let rows = self.positions().checked_mul(max_batch)?;
        let products = rows.checked_mul(g.out)?;
        let grads = rows.checked_mul(g.out.checked_next_multiple_of(implicit::NR)?)?;
        let scratch = transposed::scratch_len(&g, max_batch)?;
        let panels = backward::panels_len(&g)?.max(transposed::panels_len(&g)?);
        let total = staged
            .checked_add(products)?
            .checked_add(grads)?
            .checked_add(scratch)?
            .checked_add(panels)?;
        total.checked_mul(size_of::<f32>())?;
        Some([staged, products, grads, scratch, panels])
    }

    /// Bytes of a workspace for `max_batch` images ([`Conv2d::workspace`]); `None` on
    /// overflow.
    pub fn workspace_bytes(&self, max_batch: usize) -> Option<u64> {
        let floats: usize = self.workspace_floats(max_batch)?.iter().sum();
        u64::try_from(floats * size_of::<f32>()).ok()
    }

    /// A workspace for batches of up to `max_batch` images: the staged (padded, scaled)
    /// inputs, the outputs, the output gradients, the backward pass's padded input
    /// gradients and the packed weight, allocated once.
    ///
    /// # Panics
    /// If its size overflows ([`Conv2d::workspace_bytes`] is `None`).
    pub fn workspace(&self, max_batch: usize) -> Conv2dWorkspace {
        let [staged, output, grads, scratch, panels] = self
            .workspace_floats(max_batch)
            .unwrap_or_else(|| panic!("a conv2d workspace of {max_batch} images overflows"));
        Conv2dWorkspace {
            layer: *self,
            max_batch,
            batch: 0,
            staged: vec![0.0; staged],
            output: vec![0.0; output],
            grads: vec![0.0; grads],
            scratch: vec![0.0; scratch],
            panels: vec![0.0; panels],
            pool: None,
        }
    }

    fn check_workspace(&self, ws: &Conv2dWorkspace, batch: usize) -> Result<()> {
        if ws.layer != *self {
            return Err(Error::config(
                "conv2d workspace",
                "was made for another layer: make it with this layer's workspace()",
            ));
        }
        if batch > ws.max_batch {
            return Err(Error::shape(
                "conv2d batch (at most the workspace's max_batch)",
                ws.max_batch,
                batch,
            ));
        }
        Ok(())
    }

    fn check_params(&self, what: &'static str, len: usize) -> Result<()> {
        if len < self.bias().end {
            return Err(Error::shape(what, self.bias().end, len));
        }
        Ok(())
    }

    /// The forward pass over `batch` images `x` (`batch x in_channels x height x width`,
    /// NCHW); the outputs (`batch x out_channels x out_height x out_width`) live in `ws`
    /// until its next forward pass.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for an input or parameters of the wrong length, or more
    /// images than the workspace holds; [`Error::Config`] for a workspace of another
    /// layer.
    pub fn forward<'w>(
        &self,
        params: &[f32],
        x: &[f32],
        batch: usize,
        ws: &'w mut Conv2dWorkspace,
    ) -> Result<&'w [f32]> {
        self.check_forward(params, x.len(), batch, ws)?;
        self.forward_unchecked(params, x, batch, ws);
        Ok(&ws.output[..batch * self.output_len()])
    }

    /// [`Conv2d::forward`] over images of bytes, each read as `f32::from(byte)` and then
    /// through the layer's [`InputScale`] straight into the patches.
    ///
    /// # Errors
    /// As [`Conv2d::forward`].
    pub fn forward_u8<'w>(
        &self,
        params: &[f32],
        x: &[u8],
        batch: usize,
        ws: &'w mut Conv2dWorkspace,
    ) -> Result<&'w [f32]> {
        self.check_forward(params, x.len(), batch, ws)?;
        self.forward_u8_unchecked(params, x, batch, ws);
        Ok(&ws.output[..batch * self.output_len()])
    }

    fn check_forward(
        &self,
        params: &[f32],
        x_len: usize,
        batch: usize,
        ws: &Conv2dWorkspace,
    ) -> Result<()> {
        self.check_workspace(ws, batch)?;
        self.check_params("conv2d parameters", params.len())?;
        check_len(
            "conv2d input (batch x channels x height x width)",
            batch * self.input_len(),
            x_len,
        )
    }

    /// The forward pass on lengths the caller checked.
    pub(crate) fn forward_unchecked(
        &self,
        params: &[f32],
        x: &[f32],
        batch: usize,
        ws: &mut Conv2dWorkspace,
    ) {
        let scale = self.input_scale;
        self.run_forward(params, x, batch, ws, &|v: f32| scale.apply(v));
    }

    /// The forward pass over bytes on lengths the caller checked.
    pub(crate) fn forward_u8_unchecked(
        &self,
        params: &[f32],
        x: &[u8],
        batch: usize,
        ws: &mut Conv2dWorkspace,
    ) {
        let scale = self.input_scale;
        self.run_forward(params, x, batch, ws, &|v: u8| scale.apply(f32::from(v)));
    }

    /// Stages the images, multiplies their patches by the weight and stores the NCHW
    /// outputs with the bias and the activation; on the workspace's pool by blocks of
    /// whole images when the batch is large enough (each output element is computed the
    /// same way whichever thread runs it).
    fn run_forward<T: Copy + Sync>(
        &self,
        params: &[f32],
        x: &[T],
        batch: usize,
        ws: &mut Conv2dWorkspace,
        load: &(impl Fn(T) -> f32 + Sync),
    ) {
        let g = self.geometry();
        let isa = Isa::detect();
        g.pack_weight(&params[self.weight()], &mut ws.panels);
        let bias = &params[self.bias()];
        let relu = self.activation == Some(Activation::Relu);
        let tanh = self.activation == Some(Activation::Tanh);
        let (in_len, staged_len, out_len) = (self.input_len(), g.staged_len(), self.output_len());
        let Conv2dWorkspace {
            staged,
            output,
            panels,
            pool,
            ..
        } = ws;
        let panels = &panels[..];
        let run = |x: &[T], staged: &mut [f32], output: &mut [f32]| {
            g.forward(isa, x, load, staged, panels, bias, relu, output);
            if tanh {
                Activation::Tanh.apply(output);
            }
        };
        let staged = &mut staged[..batch * staged_len];
        let output = &mut output[..batch * out_len];
        let pool = pool
            .as_deref()
            .filter(|_| batch * self.macs_per_image() >= PARALLEL_MIN);
        implicit::by_images(
            pool,
            (staged, staged_len),
            (output, out_len),
            &|images, staged, output| {
                run(
                    &x[images.start * in_len..images.end * in_len],
                    staged,
                    output,
                );
            },
        );
        ws.batch = batch;
    }

    /// The backward pass of the last forward pass through `ws`, given the gradients of a
    /// loss with respect to its outputs (`dy`, NCHW as the outputs). Adds the weight and
    /// bias gradients into `param_grads` (laid out as the parameters, at least
    /// [`Conv2d::bias`]`.end` long) and writes the input gradients into `input_grads`
    /// (`batch x in_channels x height x width`), each if given.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length; [`Error::Config`] for a
    /// workspace of another layer.
    pub fn backward(
        &self,
        params: &[f32],
        ws: &mut Conv2dWorkspace,
        dy: &[f32],
        param_grads: Option<&mut [f32]>,
        input_grads: Option<&mut [f32]>,
    ) -> Result<()> {
        let batch = ws.batch;
        self.check_workspace(ws, batch)?;
        self.check_params("conv2d parameters", params.len())?;
        check_len(
            "conv2d output gradients (batch x channels x out height x out width)",
            batch * self.output_len(),
            dy.len(),
        )?;
        if let Some(g) = &param_grads {
            self.check_params("conv2d parameter gradients", g.len())?;
        }
        if let Some(g) = &input_grads {
            check_len(
                "conv2d input gradients (batch x channels x height x width)",
                batch * self.input_len(),
                g.len(),
            )?;
        }
        self.backward_unchecked(params, ws, dy, param_grads, input_grads);
        Ok(())
    }

    /// The backward pass on lengths the caller checked.
    pub(crate) fn backward_unchecked(
        &self,
        params: &[f32],
        ws: &mut Conv2dWorkspace,
        dy: &[f32],
        param_grads: Option<&mut [f32]>,
        input_grads: Option<&mut [f32]>,
    ) {
        let g = self.geometry();
        let isa = Isa::detect();
        let batch = ws.batch;
        let rows = batch * self.positions();
        let Conv2dWorkspace {
            staged,
            output,
            grads: gyp,
            scratch,
            panels,
            pool,
            ..
        } = ws;
        let pool = pool
            .as_deref()
            .filter(|_| batch * self.macs_per_image() >= PARALLEL_MIN);
        // The output gradients' tiles feed the weight and bias gradients only: the input
        // gradient stages its own.
        if let Some(grads) = param_grads {
            // The bias follows the weight in the parameters.
            let (weight, bias) = grads[..self.bias().end].split_at_mut(self.bias().start);
            backward::gather(
                isa,
                self.activation,
                (g.out, self.positions()),
                (dy, &output[..batch * self.output_len()]),
                gyp,
                Some(bias),
                pool,
            );
            let gyp = &gyp[..backward::grads_len(g.out, rows)];
            let staged = &staged[..batch * g.staged_len()];
            let weight = &mut weight[self.weight()];
            backward::weight_grad(&g, isa, pool, staged, gyp, rows, panels, weight);
        }
        if let Some(dx) = input_grads {
            transposed::input_grad(
                &g,
                isa,
                pool,
                self.activation,
                (dy, &output[..batch * self.output_len()]),
                &params[self.weight()],
                panels,
                scratch,
                &mut dx[..batch * self.input_len()],
                self.input_scale == InputScale::Div255,
            );
        }
    }
}

/// Products below this many multiply-adds run on the calling thread alone.
const PARALLEL_MIN: usize = 1 << 20;

/// The buffers of one [`Conv2d`] for batches of up to `max_batch` images, allocated once
/// ([`Conv2d::workspace`]): after that, its passes allocate nothing.
#[derive(Clone, Debug)]
pub struct Conv2dWorkspace {
    layer: Conv2d,
    max_batch: usize,
    batch: usize,
    /// The inputs of the last forward pass, zero-padded and scaled, NCHW: the patches
    /// both passes read.
    staged: Vec<f32>,
    /// The outputs, NCHW.
    output: Vec<f32>,
    /// The backward pass's output gradients through the activation, as tiles of 16
    /// channels: `[tile][row][16]`.
    grads: Vec<f32>,
    /// A padded layer's input gradients of a few groups of images.
    scratch: Vec<f32>,
    /// The weight as `fan_in x 16` panels of its transpose (forward); the backward
    /// pass's weight-gradient sums, then the weight as `out x 16` panels.
    panels: Vec<f32>,
    /// Threads the products run on (`None`: the calling thread only).
    pool: Option<Arc<Pool>>,
}

impl Conv2dWorkspace {
    /// The outputs of the last forward pass (`batch x out_channels x out_height x
    /// out_width`).
    pub fn output(&self) -> &[f32] {
        &self.output[..self.batch * self.layer.output_len()]
    }

    /// Images of the last forward pass.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Largest batch.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Runs the products on `pool`'s threads (`None`: on the calling thread, the
    /// default); results are bit-identical whatever the pool's size.
    pub fn set_pool(&mut self, pool: Option<Arc<Pool>>) {
        self.pool = pool;
    }

    /// The pool the products run on, if any.
    pub fn pool(&self) -> Option<&Arc<Pool>> {
        self.pool.as_ref()
    }

    /// Bytes held by its buffers ([`Conv2d::workspace_bytes`]).
    pub fn memory_bytes(&self) -> u64 {
        let floats = self.staged.len()
            + self.output.len()
            + self.grads.len()
            + self.scratch.len()
            + self.panels.len();
        (floats * size_of::<f32>()) as u64
    }
}

#[cfg(test)]
pub(crate) mod tests;
