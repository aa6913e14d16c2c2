//! Convolutional networks: [`Conv2d`] layers with an activation after each, a flatten,
//! then [`Linear`] layers, on flat parameters, as PyTorch's
//! `nn.Sequential(nn.Conv2d(..), nn.ReLU(), .., nn.Flatten(), nn.Linear(..), nn.ReLU())`
//! names and lays out its tensors.

use std::fmt;
use std::sync::Arc;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::conv::{Conv2d, Conv2dSpec, Conv2dWorkspace, InputScale};
use crate::error::{Error, Result, check_len};
use crate::init::fill_layer;
use crate::linalg::{Accumulate, WeightPack};
use crate::mlp::{layer_packs, packs_bytes};
use crate::pool::Pool;
use crate::version::Version;
use crate::{Activation, Architecture, Init, Linear, Module, TensorSpec, Weights};

/// One convolution of a [`CnnSpec`]: its input channels are the previous layer's
/// outputs. Pairs are `[height, width]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvLayer {
    /// Output channels; at least 1.
    pub out_channels: usize,
    /// Kernel height and width; each at least 1.
    pub kernel: [usize; 2],
    /// Stride; each at least 1.
    pub stride: [usize; 2],
    /// Zero padding on each side.
    pub padding: [usize; 2],
}

impl ConvLayer {
    /// A layer with a square `kernel` and equal `stride` and `padding` both ways.
    pub const fn square(out_channels: usize, kernel: usize, stride: usize, padding: usize) -> Self {
        Self {
            out_channels,
            kernel: [kernel, kernel],
            stride: [stride, stride],
            padding: [padding, padding],
        }
    }

    /// Its [`Conv2dSpec`] given its input channels.
    pub const fn spec(&self, in_channels: usize) -> Conv2dSpec {
        Conv2dSpec {
            in_channels,
            out_channels: self.out_channels,
            kernel: self.kernel,
            stride: self.stride,
            padding: self.padding,
        }
    }
}

/// Whether a [`ConvNet`]'s last layer is followed by the activation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CnnOutput {
    /// Every layer, the last included, is followed by the activation: a feature
    /// extractor (Stable-Baselines3's `NatureCNN` ends in `nn.ReLU()`). The default.
    #[default]
    Activated,
    /// The last layer is linear (a Q-value or logit head).
    Linear,
}

/// What a [`ConvNet`] is: the input image, its scaling, the convolutions, the widths of
/// the linear layers after the flatten, the activation and whether the output is
/// activated.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CnnSpec {
    /// Input `[channels, height, width]` (NCHW without the batch); each at least 1.
    pub input: [usize; 3],
    /// How the first convolution reads its input ([`InputScale::Div255`] for frames of
    /// bytes, read through [`ConvNet::forward_u8`]).
    pub input_scale: InputScale,
    /// The convolutions, input first; at least one.
    pub convs: Vec<ConvLayer>,
    /// Widths of the linear layers after the flatten, in order; may be empty (the output
    /// is then the flattened last convolution), each at least 1.
    pub linear: Vec<usize>,
    /// The nonlinearity after every layer (the last one as [`CnnSpec::output`] says).
    pub activation: Activation,
    /// Whether the last layer is activated.
    pub output: CnnOutput,
}

impl CnnSpec {
    /// The Nature DQN torso (Mnih et al. 2015; Stable-Baselines3's `NatureCNN`) on
    /// `in_channels x 84 x 84` frames of bytes scaled by 1/255: 32 8x8 kernels stride 4,
    /// 64 4x4 stride 2, 64 3x3 stride 1 (84 -> 20 -> 9 -> 7), a flatten of 3136, then
    /// `Linear(3136, features)` (512 in the paper), ReLU after every layer.
    pub fn nature_cnn(in_channels: usize, features: usize) -> Self {
        Self {
            input: [in_channels, 84, 84],
            input_scale: InputScale::Div255,
            convs: vec![
                ConvLayer::square(32, 8, 4, 0),
                ConvLayer::square(64, 4, 2, 0),
                ConvLayer::square(64, 3, 1, 0),
            ],
            linear: vec![features],
            activation: Activation::Relu,
            output: CnnOutput::Activated,
        }
    }

    /// A torso for small grids (MinAtar's 10x10, board games, 10x5 to 16x16 frames):
    /// 16 3x3 kernels stride 1, 32 3x3 stride 1 (no padding: each shrinks the grid by
    /// 2), a flatten, then `Linear(.., features)` (256 is a good start), ReLU after every
    /// layer, inputs as given. `input` is `[channels, height, width]`, at least 5 x 5.
    pub fn small_cnn(input: [usize; 3], features: usize) -> Self {
        Self {
            input,
            input_scale: InputScale::Identity,
            convs: vec![
                ConvLayer::square(16, 3, 1, 0),
                ConvLayer::square(32, 3, 1, 0),
            ],
            linear: vec![features],
            activation: Activation::Relu,
            output: CnnOutput::Activated,
        }
    }

    /// Checks the spec: sizes, and every kernel fits its (padded) input.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field (`cnn.input`, `cnn.convs[1].kernel`,
    /// `cnn.linear[0]` ...).
    pub fn validate(&self) -> Result<()> {
        self.layers().map(|_| ())
    }

    /// The layers with their offsets in the parameters, and the parameter count.
    fn layers(&self) -> Result<(Vec<Conv2d>, Vec<Linear>, usize)> {
        if self.input.contains(&0) {
            return Err(Error::config(
                "cnn.input",
                format!(
                    "is {:?}: give channels, height and width, all at least 1",
                    self.input
                ),
            ));
        }
        if self.convs.is_empty() {
            return Err(Error::config(
                "cnn.convs",
                "is empty: give at least one convolution (an Mlp has none)",
            ));
        }
        if let Some(i) = self.linear.iter().position(|&w| w == 0) {
            return Err(Error::config(
                format!("cnn.linear[{i}]"),
                "is 0: give widths of at least 1",
            ));
        }
        let overflow = || {
            Error::config(
                "cnn",
                "has more parameters than fit in memory: use fewer channels or narrower layers",
            )
        };
        let last = self.convs.len() - 1;
        let mut convs = Vec::with_capacity(self.convs.len());
        let [mut channels, mut height, mut width] = self.input;
        let mut offset = 0usize;
        for (i, layer) in self.convs.iter().enumerate() {
            let name = format!("cnn.convs[{i}]");
            let conv = Conv2d::new_as(&name, layer.spec(channels), [height, width], offset)?;
            let activated =
                i < last || !self.linear.is_empty() || self.output == CnnOutput::Activated;
            let scale = if i == 0 {
                self.input_scale
            } else {
                InputScale::Identity
            };
            let conv = conv
                .with_activation(activated.then_some(self.activation))
                .with_input_scale(scale);
            offset = offset.checked_add(conv.num_params()).ok_or_else(overflow)?;
            [height, width] = conv.output_size();
            channels = layer.out_channels;
            convs.push(conv);
        }
        let mut inputs = convs[last].output_len();
        let mut linears = Vec::with_capacity(self.linear.len());
        for &outputs in &self.linear {
            let n = inputs
                .checked_add(1)
                .and_then(|i| i.checked_mul(outputs))
                .ok_or_else(overflow)?;
            linears.push(Linear::new(inputs, outputs, offset));
            offset = offset.checked_add(n).ok_or_else(overflow)?;
            inputs = outputs;
        }
        if offset.checked_mul(size_of::<f32>()).is_none() {
            return Err(overflow());
        }
        Ok((convs, linears, offset))
    }

    /// Parameters of a network of this spec; `None` for an invalid spec or a count that
    /// overflows.
    pub fn checked_num_params(&self) -> Option<usize> {
        self.layers().ok().map(|(_, _, n)| n)
    }

    /// Bytes of a workspace for `max_rows` images ([`Module::workspace_bytes`] of a
    /// network of this spec); `None` for an invalid spec or on overflow.
    pub fn workspace_bytes(&self, max_rows: usize) -> Option<u64> {
        let (convs, linears, _) = self.layers().ok()?;
        workspace_floats(&convs, &linears, max_rows)
            .and_then(|[convs, rest]| convs.checked_add(rest.checked_mul(size_of::<f32>())?))
            .and_then(|b| u64::try_from(b).ok())
    }

    /// Elements of one input image: `channels * height * width`.
    pub fn input_len(&self) -> usize {
        self.input.iter().product()
    }
}

/// The widest activation, per image: what the gradient buffers hold.
fn widest(convs: &[Conv2d], linears: &[Linear]) -> usize {
    convs
        .iter()
        .map(Conv2d::output_len)
        .chain(linears.iter().map(Linear::outputs))
        .max()
        .unwrap_or(0)
}

/// `[conv workspace and weight pack bytes, other floats]` of a workspace for `max_rows`
/// images.
fn workspace_floats(convs: &[Conv2d], linears: &[Linear], max_rows: usize) -> Option<[usize; 2]> {
    let conv_bytes = convs.iter().try_fold(0usize, |sum, c| {
        sum.checked_add(usize::try_from(c.workspace_bytes(max_rows)?).ok()?)
    })?;
    let conv_bytes = conv_bytes.checked_add(packs_bytes(
        linears.iter().map(|l| (l.inputs(), l.outputs())),
    )?)?;
    let outputs = linears
        .iter()
        .try_fold(0usize, |sum, l| sum.checked_add(l.outputs()))?;
    let rest = outputs
        .checked_add(widest(convs, linears).checked_mul(2)?)?
        .checked_mul(max_rows)?;
    Some([conv_bytes, rest])
}

impl fmt::Display for CnnSpec {
    /// `4x84x84/255 conv 32k8x8s4x4p0x0 64k4x4s2x2p0x0 linear 512 relu`, then
    /// ` linear-output` when the last layer is linear.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [c, h, w] = self.input;
        write!(f, "{c}x{h}x{w}")?;
        if self.input_scale == InputScale::Div255 {
            f.write_str("/255")?;
        }
        f.write_str(" conv")?;
        for l in &self.convs {
            write!(
                f,
                " {}k{}x{}s{}x{}p{}x{}",
                l.out_channels,
                l.kernel[0],
                l.kernel[1],
                l.stride[0],
                l.stride[1],
                l.padding[0],
                l.padding[1]
            )?;
        }
        if !self.linear.is_empty() {
            f.write_str(" linear")?;
            for w in &self.linear {
                write!(f, " {w}")?;
            }
        }
        write!(f, " {}", self.activation)?;
        if self.output == CnnOutput::Linear {
            f.write_str(" linear-output")?;
        }
        Ok(())
    }
}

/// A convolutional network on flat parameters, shapes chosen at run time: [`Conv2d`]
/// layers over NCHW images, a flatten, [`Linear`] layers, the [`CnnSpec`]'s activation
/// after each. A [`Module`] like [`Mlp`](crate::Mlp): its rows are images
/// (`channels * height * width` each), its tensors are named as in the equivalent
/// `nn.Sequential` (`0.weight` `[out, in, kh, kw]`, `0.bias`, `2.weight` ...; the
/// flatten takes an index, so the first linear layer of a three-convolution network is
/// `7`), so checkpoints, weight files and [`Adam`](crate::Adam) treat it like any
/// network.
///
/// ```
/// use rl_nn::{CnnSpec, ConvNet, Init, Module, Weights};
/// use rand::SeedableRng;
///
/// # fn main() -> rl_nn::Result<()> {
/// let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
/// let net = ConvNet::new(CnnSpec::small_cnn([2, 10, 5], 64), Init::Uniform, &mut rng)?;
/// let mut ws = net.workspace(8);
/// let frames = vec![1u8; 8 * 2 * 10 * 5];
/// let features = net.forward_u8(&frames, 8, &mut ws)?;
/// assert_eq!(features.len(), 8 * 64);
/// let mut grads = vec![0.0; net.num_params()];
/// net.backward(&mut ws, &[1.0; 8 * 64], Some(&mut grads), None)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ConvNet {
    spec: CnnSpec,
    convs: Vec<Conv2d>,
    linears: Vec<Linear>,
    params: Vec<f32>,
    /// Renewed whenever `params` may change (not part of equality).
    version: Version,
}

impl PartialEq for ConvNet {
    fn eq(&self, other: &Self) -> bool {
        (&self.spec, &self.convs, &self.linears, &self.params)
            == (&other.spec, &other.convs, &other.linears, &other.params)
    }
}

impl ConvNet {
    /// A network of `spec`, initialised by `init` from `rng`: [`Init::Uniform`] is
    /// PyTorch's default for `nn.Conv2d` and `nn.Linear` (uniform in
    /// `+-1/sqrt(fan_in)`, fan-in `in * kh * kw` for a convolution);
    /// [`Init::Orthogonal`] treats a convolution's weight as the `out x (in * kh * kw)`
    /// matrix `torch.nn.init.orthogonal_` sees, the last layer taking the output gain.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid spec or initialisation.
    pub fn new<R: Rng + ?Sized>(spec: CnnSpec, init: Init, rng: &mut R) -> Result<Self> {
        init.validate()?;
        let mut net = Self::zeros(spec)?;
        let last = net.convs.len() + net.linears.len() - 1;
        let shapes = net
            .convs
            .iter()
            .map(|c| (c.weight().start, c.spec().fan_in(), c.spec().out_channels))
            .chain(
                net.linears
                    .iter()
                    .map(|l| (l.weight().start, l.inputs(), l.outputs())),
            );
        for (i, (start, fan_in, outputs)) in shapes.enumerate() {
            let (w, b) =
                net.params[start..start + (fan_in + 1) * outputs].split_at_mut(fan_in * outputs);
            fill_layer(init, i == last, w, b, fan_in, rng);
        }
        Ok(net)
    }

    /// Multiplies the last layer's weights by `scale` and zeroes its bias (a small
    /// policy head starts close to uniform), as [`Mlp::scale_output_layer`](crate::Mlp::scale_output_layer).
    pub fn scale_output_layer(&mut self, scale: f32) {
        self.version = Version::fresh();
        let (weight, bias) = match self.linears.last() {
            Some(l) => (l.weight(), l.bias()),
            None => {
                let c = &self.convs[self.convs.len() - 1];
                (c.weight(), c.bias())
            }
        };
        self.params[weight].iter_mut().for_each(|w| *w *= scale);
        self.params[bias].fill(0.0);
    }

    /// A network of `spec` with every parameter 0 (to load weights into).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid spec.
    pub fn zeros(spec: CnnSpec) -> Result<Self> {
        let (convs, linears, n) = spec.layers()?;
        Ok(Self {
            spec,
            convs,
            linears,
            params: vec![0.0; n],
            version: Version::fresh(),
        })
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &CnnSpec {
        &self.spec
    }

    /// Its convolutions, input first.
    pub fn convs(&self) -> &[Conv2d] {
        &self.convs
    }

    /// Its linear layers after the flatten.
    pub fn linears(&self) -> &[Linear] {
        &self.linears
    }

    /// [`Module::forward`] over images of bytes (`rows x channels x height x width`),
    /// each read as `f32::from(byte)` and through the spec's [`InputScale`] straight into
    /// the first layer's patches: the frames are never stored as `f32` images.
    ///
    /// # Errors
    /// As [`Module::forward`].
    pub fn forward_u8<'w>(
        &self,
        input: &[u8],
        rows: usize,
        ws: &'w mut CnnWorkspace,
    ) -> Result<&'w [f32]> {
        self.check_workspace(ws, rows)?;
        check_len(
            "network input (images x channels x height x width)",
            rows * self.input_dim(),
            input.len(),
        )?;
        self.convs[0].forward_u8_unchecked(&self.params, input, rows, &mut ws.convs[0]);
        Ok(self.forward_rest(rows, ws))
    }

    fn check_workspace(&self, ws: &CnnWorkspace, rows: usize) -> Result<()> {
        if ws.spec != self.spec {
            return Err(Error::ArchitectureMismatch {
                what: "workspace".to_owned(),
                expected: self.architecture(),
                found: Architecture::Cnn(Box::new(ws.spec.clone())),
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

    /// Every layer after the first convolution, whose outputs are in `ws`.
    fn forward_rest<'w>(&self, rows: usize, ws: &'w mut CnnWorkspace) -> &'w [f32] {
        ws.rows = rows;
        for (l, conv) in self.convs.iter().enumerate().skip(1) {
            let (done, rest) = ws.convs.split_at_mut(l);
            conv.forward_unchecked(&self.params, done[l - 1].output(), rows, &mut rest[0]);
        }
        let last = self.linears.len().wrapping_sub(1);
        let features = ws.convs[self.convs.len() - 1].output();
        for (j, layer) in self.linears.iter().enumerate() {
            let (done, rest) = ws.linear.split_at_mut(j);
            let x = if j == 0 { features } else { &done[j - 1][..] };
            let activated = j < last || self.spec.output == CnnOutput::Activated;
            layer.forward_reusing(
                ws.pool.as_deref(),
                (&mut ws.packs[j], self.version),
                &self.params,
                (x, rows),
                &mut rest[0][..rows * layer.outputs()],
                activated.then_some(self.spec.activation),
            );
        }
        match ws.linear.last() {
            Some(y) => &y[..rows * self.output_dim()],
            None => ws.convs[self.convs.len() - 1].output(),
        }
    }
}

impl Weights for ConvNet {
    fn architecture(&self) -> Architecture {
        Architecture::Cnn(Box::new(self.spec.clone()))
    }

    fn params(&self) -> &[f32] {
        &self.params
    }

    fn params_mut(&mut self) -> &mut [f32] {
        self.version = Version::fresh();
        &mut self.params
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let mut tensors = Vec::with_capacity(2 * (self.convs.len() + self.linears.len()));
        for (l, conv) in self.convs.iter().enumerate() {
            let s = conv.spec();
            tensors.push(TensorSpec {
                name: format!("{}.weight", 2 * l),
                shape: vec![s.out_channels, s.in_channels, s.kernel[0], s.kernel[1]],
                offset: conv.weight().start,
            });
            tensors.push(TensorSpec {
                name: format!("{}.bias", 2 * l),
                shape: vec![s.out_channels],
                offset: conv.bias().start,
            });
        }
        // The flatten sits at index 2 * convs.
        let first = 2 * self.convs.len() + 1;
        for (j, layer) in self.linears.iter().enumerate() {
            tensors.push(TensorSpec {
                name: format!("{}.weight", first + 2 * j),
                shape: vec![layer.outputs(), layer.inputs()],
                offset: layer.weight().start,
            });
            tensors.push(TensorSpec {
                name: format!("{}.bias", first + 2 * j),
                shape: vec![layer.outputs()],
                offset: layer.bias().start,
            });
        }
        tensors
    }
}

impl Module for ConvNet {
    type Workspace = CnnWorkspace;

    fn input_dim(&self) -> usize {
        self.spec.input_len()
    }

    fn output_dim(&self) -> usize {
        match self.linears.last() {
            Some(l) => l.outputs(),
            None => self.convs[self.convs.len() - 1].output_len(),
        }
    }

    /// # Panics
    /// If the workspace's size overflows ([`CnnSpec::workspace_bytes`] is `None`).
    fn workspace(&self, max_rows: usize) -> CnnWorkspace {
        if workspace_floats(&self.convs, &self.linears, max_rows).is_none() {
            panic!("a cnn workspace of {max_rows} rows overflows");
        }
        let widest = widest(&self.convs, &self.linears);
        CnnWorkspace {
            spec: self.spec.clone(),
            max_rows,
            rows: 0,
            convs: self.convs.iter().map(|c| c.workspace(max_rows)).collect(),
            linear: self
                .linears
                .iter()
                .map(|l| vec![0.0; l.outputs() * max_rows])
                .collect(),
            delta: vec![0.0; widest * max_rows],
            next_delta: vec![0.0; widest * max_rows],
            packs: layer_packs(&self.linears),
            pool: None,
        }
    }

    /// [`CnnSpec::workspace_bytes`], saturating at `u64::MAX` (such a workspace could
    /// not be allocated).
    fn workspace_bytes(&self, max_rows: usize) -> u64 {
        self.spec.workspace_bytes(max_rows).unwrap_or(u64::MAX)
    }

    fn forward<'w>(
        &self,
        input: &[f32],
        rows: usize,
        ws: &'w mut CnnWorkspace,
    ) -> Result<&'w [f32]> {
        self.check_workspace(ws, rows)?;
        check_len(
            "network input (images x channels x height x width)",
            rows * self.input_dim(),
            input.len(),
        )?;
        self.convs[0].forward_unchecked(&self.params, input, rows, &mut ws.convs[0]);
        Ok(self.forward_rest(rows, ws))
    }

    fn backward(
        &self,
        ws: &mut CnnWorkspace,
        output_grads: &[f32],
        mut param_grads: Option<&mut [f32]>,
        mut input_grads: Option<&mut [f32]>,
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
            "input gradients (images x channels x height x width)",
        )?;
        let CnnWorkspace {
            convs,
            linear,
            delta,
            next_delta,
            pool,
            ..
        } = ws;
        let pool = pool.as_deref();
        delta[..output_grads.len()].copy_from_slice(output_grads);
        // An activated last linear layer (a convolution applies its own derivative).
        if let Some(y) = linear.last()
            && self.spec.output == CnnOutput::Activated
        {
            let n = output_grads.len();
            self.spec.activation.backward(&y[..n], &mut delta[..n]);
        }
        for (j, layer) in self.linears.iter().enumerate().rev() {
            let dy = &delta[..rows * layer.outputs()];
            let x = if j == 0 {
                convs[self.convs.len() - 1].output()
            } else {
                &linear[j - 1][..rows * layer.inputs()]
            };
            if let Some(grads) = param_grads.as_deref_mut() {
                layer.backward_params_on(pool, x, dy, rows, grads);
            }
            let dx = &mut next_delta[..rows * layer.inputs()];
            layer.backward_input_on(pool, &self.params, dy, rows, dx, Accumulate::Overwrite);
            // A convolution applies its activation's derivative itself.
            if j > 0 {
                self.spec.activation.backward(x, dx);
            }
            std::mem::swap(delta, next_delta);
        }
        for (l, conv) in self.convs.iter().enumerate().rev() {
            let dy = &delta[..rows * conv.output_len()];
            let dx = if l == 0 {
                input_grads.as_deref_mut()
            } else {
                Some(&mut next_delta[..rows * conv.input_len()])
            };
            conv.backward_unchecked(
                &self.params,
                &mut convs[l],
                dy,
                param_grads.as_deref_mut(),
                dx,
            );
            std::mem::swap(delta, next_delta);
        }
        Ok(())
    }
}

/// Activations and gradient scratch of one [`ConvNet`] for batches of up to `max_rows`
/// images, allocated once ([`Module::workspace`]): after that, its passes allocate
/// nothing.
#[derive(Clone, Debug)]
pub struct CnnWorkspace {
    spec: CnnSpec,
    max_rows: usize,
    rows: usize,
    convs: Vec<Conv2dWorkspace>,
    /// Outputs of the linear layers.
    linear: Vec<Vec<f32>>,
    delta: Vec<f32>,
    next_delta: Vec<f32>,
    /// Each linear layer's packed `W^T`, reused while the network's parameters keep their
    /// version.
    packs: Vec<WeightPack>,
    /// Threads the linear layers' products run on (the convolutions hold their own).
    pool: Option<Arc<Pool>>,
}

impl CnnWorkspace {
    /// Outputs of the last forward pass (`rows x output_dim`).
    pub fn output(&self) -> &[f32] {
        let rows = self.rows;
        match self.linear.last() {
            Some(y) => &y[..rows * y.len() / self.max_rows.max(1)],
            None => self.convs[self.convs.len() - 1].output(),
        }
    }

    /// Images of the last forward pass.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Largest batch.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Runs the passes through this workspace on `pool`'s threads (`None`: on the
    /// calling thread, the default). Results are bit-identical whatever the pool's size
    /// ([`matmul_on`](crate::matmul_on)).
    pub fn set_pool(&mut self, pool: Option<Arc<Pool>>) {
        for conv in &mut self.convs {
            conv.set_pool(pool.clone());
        }
        self.pool = pool;
    }

    /// The pool the passes run on, if any.
    pub fn pool(&self) -> Option<&Arc<Pool>> {
        self.pool.as_ref()
    }

    /// Bytes held by its buffers ([`Module::workspace_bytes`] of its network).
    pub fn memory_bytes(&self) -> u64 {
        let floats = self.linear.iter().map(Vec::len).sum::<usize>()
            + self.delta.len()
            + self.next_delta.len();
        self.convs
            .iter()
            .map(Conv2dWorkspace::memory_bytes)
            .sum::<u64>()
            + self.packs.iter().map(WeightPack::memory_bytes).sum::<u64>()
            + (floats * size_of::<f32>()) as u64
    }
}

/// The PyTorch module these weights load into, e.g. `nn.Sequential(nn.Conv2d(4, 32,
/// kernel_size=(8, 8), stride=(4, 4), padding=(0, 0)), nn.ReLU(), .., nn.Flatten(),
/// nn.Linear(3136, 512), nn.ReLU())`, with a note when inputs are divided by 255 first.
pub(crate) fn torch_description(spec: &CnnSpec) -> Option<String> {
    let (convs, linears, _) = spec.layers().ok()?;
    let act = format!("nn.{}()", spec.activation.torch_name());
    let mut parts = Vec::new();
    for conv in &convs {
        let s = conv.spec();
        parts.push(format!(
            "nn.Conv2d({}, {}, kernel_size=({}, {}), stride=({}, {}), padding=({}, {}))",
            s.in_channels,
            s.out_channels,
            s.kernel[0],
            s.kernel[1],
            s.stride[0],
            s.stride[1],
            s.padding[0],
            s.padding[1]
        ));
        if conv.activation().is_some() {
            parts.push(act.clone());
        }
    }
    parts.push("nn.Flatten()".to_owned());
    let last = linears.len().wrapping_sub(1);
    for (j, l) in linears.iter().enumerate() {
        parts.push(format!("nn.Linear({}, {})", l.inputs(), l.outputs()));
        if j < last || spec.output == CnnOutput::Activated {
            parts.push(act.clone());
        }
    }
    let scale = match spec.input_scale {
        InputScale::Identity => "",
        InputScale::Div255 => " applied to input / 255",
    };
    Some(format!("nn.Sequential({}){scale}", parts.join(", ")))
}

#[cfg(test)]
mod tests;
