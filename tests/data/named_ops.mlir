// Named linalg ops (transpose, fill, matmul, broadcast, reduce, map) and reshapes: y = collapse(x) @ transpose(w) + b, expanded back to
// (2, 3, 8), then a numerically stable softmax over the last dim (max= and += reductions).
func.func @proj_softmax(%x: tensor<2x3x4xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>)
    -> tensor<2x3x8xf32> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %xc = tensor.collapse_shape %x [[0, 1], [2]] : tensor<2x3x4xf32> into tensor<6x4xf32>
  %e48 = tensor.empty() : tensor<4x8xf32>
  %wt = linalg.transpose ins(%w : tensor<8x4xf32>) outs(%e48 : tensor<4x8xf32>) permutation = [1, 0]
  %e68 = tensor.empty() : tensor<6x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e68 : tensor<6x8xf32>) -> tensor<6x8xf32>
  %mm = linalg.matmul ins(%xc, %wt : tensor<6x4xf32>, tensor<4x8xf32>) outs(%acc : tensor<6x8xf32>) -> tensor<6x8xf32>
  %bb = linalg.broadcast ins(%b : tensor<8xf32>) outs(%e68 : tensor<6x8xf32>) dimensions = [0]
  %y = linalg.map ins(%mm, %bb : tensor<6x8xf32>, tensor<6x8xf32>) outs(%e68 : tensor<6x8xf32>)
    (%u: f32, %v: f32, %w0: f32) {
      %s = arith.addf %u, %v : f32
      linalg.yield %s : f32
    }
  %y3 = tensor.expand_shape %y [[0, 1], [2]] output_shape [2, 3, 8] : tensor<6x8xf32> into tensor<2x3x8xf32>
  %e23 = tensor.empty() : tensor<2x3xf32>
  %minf = linalg.fill ins(%ninf : f32) outs(%e23 : tensor<2x3xf32>) -> tensor<2x3xf32>
  %m = linalg.reduce ins(%y3 : tensor<2x3x8xf32>) outs(%minf : tensor<2x3xf32>) dimensions = [2]
    (%in: f32, %init: f32) {
      %mx = arith.maximumf %in, %init : f32
      linalg.yield %mx : f32
    }
  %e238 = tensor.empty() : tensor<2x3x8xf32>
  %mb = linalg.broadcast ins(%m : tensor<2x3xf32>) outs(%e238 : tensor<2x3x8xf32>) dimensions = [2]
  %p = linalg.map ins(%y3, %mb : tensor<2x3x8xf32>, tensor<2x3x8xf32>) outs(%e238 : tensor<2x3x8xf32>)
    (%u: f32, %v: f32, %w0: f32) {
      %s2 = arith.subf %u, %v : f32
      %ex = math.exp %s2 : f32
      linalg.yield %ex : f32
    }
  %z = linalg.fill ins(%zero : f32) outs(%e23 : tensor<2x3xf32>) -> tensor<2x3xf32>
  %l = linalg.reduce ins(%p : tensor<2x3x8xf32>) outs(%z : tensor<2x3xf32>) dimensions = [2]
    (%in: f32, %init: f32) {
      %s = arith.addf %in, %init : f32
      linalg.yield %s : f32
    }
  %lb = linalg.broadcast ins(%l : tensor<2x3xf32>) outs(%e238 : tensor<2x3x8xf32>) dimensions = [2]
  %sm = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>,
                                        affine_map<(a, b, c) -> (a, b, c)>],
                        iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%p, %lb : tensor<2x3x8xf32>, tensor<2x3x8xf32>) outs(%e238 : tensor<2x3x8xf32>) {
    ^bb0(%u: f32, %v: f32, %o: f32):
      %q = arith.divf %u, %v : f32
      linalg.yield %q : f32
  } -> tensor<2x3x8xf32>
  return %sm : tensor<2x3x8xf32>
}
