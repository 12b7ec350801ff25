//! The CUDA spelling of memory barriers (`mbarrier`) and tensor copies
//! (`cp.async.bulk.tensor`, sm_90): calls of the prelude's `tma` helpers.

use super::Cuda;
use crate::cfamily::{BodyWriter, EmitResult};
use metile_ir::gpu_ir::{GpuOp, GpuOpKind};

impl BodyWriter<'_, Cuda> {
    pub(super) fn tma_op(&mut self, op: &GpuOp, depth: usize) -> EmitResult<()> {
        let arg = |i: usize| -> EmitResult<String> {
            let mut s = String::new();
            self.name(op.operands[i])?.push_to(&mut s);
            Ok(s)
        };
        let line = match op.kind {
            GpuOpKind::MbarrierInit { count } => {
                format!("metile_mbarrier_init({} + {}, {count});", arg(0)?, arg(1)?)
            }
            GpuOpKind::MbarrierArrive { expect_tx: false } => {
                format!("metile_mbarrier_arrive({} + {});", arg(0)?, arg(1)?)
            }
            GpuOpKind::MbarrierArrive { expect_tx: true } => format!(
                "metile_mbarrier_arrive_expect_tx({} + {}, {});",
                arg(0)?,
                arg(1)?,
                arg(2)?
            ),
            GpuOpKind::MbarrierWait => {
                format!("metile_mbarrier_wait({} + {}, {});", arg(0)?, arg(1)?, arg(2)?)
            }
            GpuOpKind::TmaLoad if op.operands.len() == 8 => format!(
                "metile_tma_load_stacked({} + {}, &{}, {}, {}, {}, {} + {});",
                arg(0)?,
                arg(1)?,
                arg(2)?,
                arg(3)?,
                arg(4)?,
                arg(7)?,
                arg(5)?,
                arg(6)?
            ),
            GpuOpKind::TmaLoad => format!(
                "metile_tma_load({} + {}, &{}, {}, {}, {} + {});",
                arg(0)?,
                arg(1)?,
                arg(2)?,
                arg(3)?,
                arg(4)?,
                arg(5)?,
                arg(6)?
            ),
            _ => return Err(format!("{} is no tensor-copy op", op.kind.name())),
        };
        self.line(depth, &line);
        Ok(())
    }
}
