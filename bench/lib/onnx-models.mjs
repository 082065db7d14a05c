// ONNX graphs for the onnxruntime-web peers, built in code with onnx-proto (no model files on disk).
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;
const FLOAT = onnx.TensorProto.DataType.FLOAT;
const INT32 = onnx.TensorProto.DataType.INT32;
const INT64 = onnx.TensorProto.DataType.INT64;
const A = onnx.AttributeProto.AttributeType;

function valueInfo(name, elemType, dims) {
  return onnx.ValueInfoProto.create({
    name,
    type: onnx.TypeProto.create({
      tensorType: onnx.TypeProto.Tensor.create({
        elemType,
        // A string is a symbolic dim (dimParam), left to the runtime.
        shape: onnx.TensorShapeProto.create({
          dim: dims.map((d) =>
            onnx.TensorShapeProto.Dimension.create(typeof d === 'string' ? { dimParam: d } : { dimValue: d }),
          ),
        }),
      }),
    }),
  });
}

function int64Initializer(name, values) {
  return onnx.TensorProto.create({ name, dataType: INT64, dims: [values.length], int64Data: values });
}

function floatScalar(name, value) {
  return onnx.TensorProto.create({ name, dataType: FLOAT, dims: [], floatData: [value] });
}

function node(opType, inputs, outputs, attrs = [], domain = '') {
  return onnx.NodeProto.create({ opType, input: inputs, output: outputs, attribute: attrs, domain, name: outputs[0] });
}

const ints = (name, values) => onnx.AttributeProto.create({ name, type: A.INTS, ints: values });
const int = (name, value) => onnx.AttributeProto.create({ name, type: A.INT, i: value });
const float = (name, value) => onnx.AttributeProto.create({ name, type: A.FLOAT, f: value });

function model(graph, opsets) {
  return onnx.ModelProto.encode(
    onnx.ModelProto.create({
      irVersion: 8,
      producerName: 'mha-wasm-bench',
      opsetImport: opsets.map(([domain, version]) => onnx.OperatorSetIdProto.create({ domain, version })),
      graph,
    }),
  ).finish();
}

/**
 * Standard ops: Reshape -> Transpose -> MatMul -> Mul -> (Add mask bias) -> Softmax -> MatMul ->
 * Transpose -> Reshape. Inputs q (B,S,D), k (B,T,D), v (B,T,D) and, when masked, bias (1,1,S,T)
 * holding 0 / -inf. Output out (B,S,D).
 */
export function standardOpsModel(shape, masked) {
  const { B, S, T, D, H } = shape;
  const Dh = D / H;
  const scale = Math.fround(1 / Math.sqrt(Dh));
  const nodes = [
    node('Reshape', ['q', 'q_shape'], ['q4']),
    node('Transpose', ['q4'], ['qh'], [ints('perm', [0, 2, 1, 3])]), // (B,H,S,Dh)
    node('Reshape', ['k', 'kv_shape'], ['k4']),
    node('Transpose', ['k4'], ['kt'], [ints('perm', [0, 2, 3, 1])]), // (B,H,Dh,T)
    node('Reshape', ['v', 'kv_shape'], ['v4']),
    node('Transpose', ['v4'], ['vh'], [ints('perm', [0, 2, 1, 3])]), // (B,H,T,Dh)
    node('MatMul', ['qh', 'kt'], ['qk']), // (B,H,S,T)
    node('Mul', ['qk', 'scale'], ['scores']),
  ];
  let logits = 'scores';
  if (masked) {
    nodes.push(node('Add', ['scores', 'bias'], ['masked']));
    logits = 'masked';
  }
  nodes.push(
    node('Softmax', [logits], ['probs'], [int('axis', -1)]),
    node('MatMul', ['probs', 'vh'], ['oh']), // (B,H,S,Dh)
    node('Transpose', ['oh'], ['o4'], [ints('perm', [0, 2, 1, 3])]),
    node('Reshape', ['o4', 'out_shape'], ['out']),
  );
  const inputs = [valueInfo('q', FLOAT, [B, S, D]), valueInfo('k', FLOAT, [B, T, D]), valueInfo('v', FLOAT, [B, T, D])];
  if (masked) inputs.push(valueInfo('bias', FLOAT, [1, 1, S, T]));
  const graph = onnx.GraphProto.create({
    name: 'mha_standard_ops',
    node: nodes,
    input: inputs,
    output: [valueInfo('out', FLOAT, [B, S, D])],
    initializer: [
      int64Initializer('q_shape', [B, S, H, Dh]),
      int64Initializer('kv_shape', [B, T, H, Dh]),
      int64Initializer('out_shape', [B, S, D]),
      floatScalar('scale', scale),
    ],
  });
  return model(graph, [['', 17]]);
}

/**
 * com.microsoft.MultiHeadAttention contrib op. Inputs: query (B,S,D), key (B,T,D), value (B,T,D),
 * bias (omitted), key_padding_mask (B,S,T) int32 when masked (0 = hidden: -10000 is added).
 */
export function contribModel(shape, masked) {
  const { B, S, T, D, H } = shape;
  const scale = Math.fround(1 / Math.sqrt(D / H));
  const inputs = [valueInfo('q', FLOAT, [B, S, D]), valueInfo('k', FLOAT, [B, T, D]), valueInfo('v', FLOAT, [B, T, D])];
  const opInputs = ['q', 'k', 'v'];
  if (masked) {
    inputs.push(valueInfo('mask', INT32, [B, S, T]));
    opInputs.push('', 'mask');
  }
  const graph = onnx.GraphProto.create({
    name: 'mha_contrib',
    node: [
      node('MultiHeadAttention', opInputs, ['out'], [int('num_heads', H), float('scale', scale)], 'com.microsoft'),
    ],
    input: inputs,
    output: [valueInfo('out', FLOAT, [B, S, D])],
  });
  return model(graph, [
    ['', 17],
    ['com.microsoft', 1],
  ]);
}

/** (1,1,S,T) additive causal bias: 0 where j <= i, -inf elsewhere. */
export function causalBias(S, T) {
  const bias = new Float32Array(S * T);
  for (let i = 0; i < S; i++) for (let j = i + 1; j < T; j++) bias[i * T + j] = -Infinity;
  return bias;
}

/** (B,S,T) int32 causal key_padding_mask: 1 where j <= i. */
export function causalMaskInt32(B, S, T) {
  const mask = new Int32Array(B * S * T);
  for (let b = 0; b < B; b++)
    for (let i = 0; i < S; i++) for (let j = 0; j <= i && j < T; j++) mask[(b * S + i) * T + j] = 1;
  return mask;
}

/**
 * com.microsoft.GroupQueryAttention contrib op (always causal, lower-right aligned) over a past of
 * `pastLength` tokens P: 0 is a prefill (S = T), P = T - 1 with S = 1 a decode step. Inputs q (B,S,H·Dh),
 * k and v (B,S,Hkv·Dh), past_key/past_value (B,Hkv,P,Dh), seqlens_k (B) int32 = P + S - 1,
 * total_sequence_length int32 scalar = P + S. A window [left, 0] is its local_window_size = left; softcap
 * its softcap attribute. Outputs out and the present K/V (B,Hkv,P+S,Dh): the past and the new tokens
 * concatenated, which the op writes at every call.
 */
export function gqaModel(shape, { pastLength = 0 } = {}) {
  const { B, S, D, H } = shape;
  const Hkv = shape.Hkv ?? H;
  const Dh = D / H;
  const attrs = [int('num_heads', H), int('kv_num_heads', Hkv), float('scale', Math.fround(1 / Math.sqrt(Dh)))];
  if (shape.window) attrs.push(int('local_window_size', shape.window[0]));
  if (shape.softcap !== undefined) attrs.push(float('softcap', shape.softcap));
  const graph = onnx.GraphProto.create({
    name: 'gqa_contrib',
    node: [
      node(
        'GroupQueryAttention',
        ['q', 'k', 'v', 'past_key', 'past_value', 'seqlens_k', 'total_sequence_length'],
        ['out', 'present_key', 'present_value'],
        attrs,
        'com.microsoft',
      ),
    ],
    input: [
      valueInfo('q', FLOAT, [B, S, H * Dh]),
      valueInfo('k', FLOAT, [B, S, Hkv * Dh]),
      valueInfo('v', FLOAT, [B, S, Hkv * Dh]),
      valueInfo('past_key', FLOAT, [B, Hkv, pastLength, Dh]),
      valueInfo('past_value', FLOAT, [B, Hkv, pastLength, Dh]),
      valueInfo('seqlens_k', INT32, [B]),
      valueInfo('total_sequence_length', INT32, []),
    ],
    // The present length is symbolic: onnxruntime's shape inference gives present the past's length (a
    // buffer shared between steps), while the kernel writes past + S tokens when the past is shorter.
    output: [
      valueInfo('out', FLOAT, [B, S, H * Dh]),
      ...['present_key', 'present_value'].map((name) =>
        valueInfo(name, FLOAT, [B, Hkv, pastLength ? 'present_length' : S, Dh]),
      ),
    ],
  });
  return model(graph, [
    ['', 17],
    ['com.microsoft', 1],
  ]);
}
