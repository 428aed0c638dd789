//! The NPU operator family (`0x10xx`): AscendCL's two-phase `aclnn*` calls as "run this work".
//! Phase one (`aclnn<Op>GetWorkspaceSize`) sends the operator and its operands' descriptions;
//! the daemon checks every operand is the session's device memory, in bounds, builds them with
//! the backend's `libopapi.so` and holds the executor for the session. Phase two runs it on a
//! stream of the session, with the session's workspace memory.

crate::codec::wire_struct! {
    /// An `aclTensor` as `aclCreateTensor` takes it: `data` is the storage's first byte, `offset`
    /// (in elements) where the view starts in it; `dtype` an `aclDataType`, `format` an `aclFormat`.
    pub struct NpuTensor {
        pub data: crate::DevicePtr, pub dtype: u32, pub format: u32, pub offset: i64,
        pub view: Vec<i64>, pub strides: Vec<i64>, pub storage: Vec<i64>,
    }
    max_count = 16;
}

crate::codec::wire_struct! {
    /// An `aclScalar`: its value's bytes (little-endian, in the low bytes) and `aclDataType`.
    #[derive(Copy)]
    pub struct NpuScalar { pub bits: u64, pub dtype: u32 }
}

/// `aclnnAdd`: tensors self, other, out; `alpha` the scalar.
pub const NPU_OP_ADD: u32 = 1;
/// `aclnnMul`: tensors self, other, out.
pub const NPU_OP_MUL: u32 = 2;
/// `aclnnMatmul`: tensors self, mat2, out; `param` the cube math type.
pub const NPU_OP_MATMUL: u32 = 3;
/// `aclnnSoftmax`: tensors self, out; `param` the dimension.
pub const NPU_OP_SOFTMAX: u32 = 4;
/// `aclnnReduceSum`: tensors self, out; `param` bits 0..8 the reduced dimensions as a mask (an
/// empty `aclIntArray` sent as every dimension), bit 8 `keepDim`, bits 32..64 the `dtype`.
pub const NPU_OP_REDUCE_SUM: u32 = 5;
/// [`NPU_OP_REDUCE_SUM`]'s `param` bit for `keepDim`.
pub const NPU_REDUCE_KEEP_DIM: i64 = 1 << 8;
/// A device attribute of an NPU in the device list: its AI Core count (what DCMI's chip info says).
pub const NPU_ATTR_AICORES: u32 = 0x4e50_0001;
