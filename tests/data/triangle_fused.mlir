// The outgoing triangle einsum t[i,j,c] = sum_k a[i,k,c] * b[j,k,c], with the gated
// projections a = sigmoid(ga) * pa and b = sigmoid(gb) * pb computed on the fly inside the
// einsum's body (the fused form a compiler produces), then a masked output.
#ik = affine_map<(i, j, k, c) -> (i, k, c)>
#jk = affine_map<(i, j, k, c) -> (j, k, c)>
#ij = affine_map<(i, j, k, c) -> (i, j, c)>
#id = affine_map<(i, j, c) -> (i, j, c)>
#m2 = affine_map<(i, j, c) -> (i, j)>
func.func @triangle(%ga: tensor<8x8x4xf32>, %pa: tensor<8x8x4xf32>, %gb: tensor<8x8x4xf32>,
                    %pb: tensor<8x8x4xf32>, %mask: tensor<8x8xf32>) -> tensor<8x8x4xf32> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %empty = tensor.empty() : tensor<8x8x4xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x8x4xf32>) -> tensor<8x8x4xf32>
  %t = linalg.generic {indexing_maps = [#ik, #ik, #jk, #jk, #ij],
                       iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%ga, %pa, %gb, %pb : tensor<8x8x4xf32>, tensor<8x8x4xf32>, tensor<8x8x4xf32>,
                               tensor<8x8x4xf32>)
      outs(%acc : tensor<8x8x4xf32>) {
  ^bb0(%g1: f32, %p1: f32, %g2: f32, %p2: f32, %o: f32):
    %n1 = arith.negf %g1 : f32
    %e1 = math.exp %n1 : f32
    %d1 = arith.addf %one, %e1 : f32
    %s1 = arith.divf %one, %d1 : f32
    %a = arith.mulf %s1, %p1 : f32
    %n2 = arith.negf %g2 : f32
    %e2 = math.exp %n2 : f32
    %d2 = arith.addf %e2, %one : f32
    %s2 = arith.divf %one, %d2 : f32
    %b = arith.mulf %p2, %s2 : f32
    %ab = arith.mulf %a, %b : f32
    %r = arith.addf %o, %ab : f32
    linalg.yield %r : f32
  } -> tensor<8x8x4xf32>
  %out = linalg.generic {indexing_maps = [#id, #m2, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%t, %mask : tensor<8x8x4xf32>, tensor<8x8xf32>) outs(%empty : tensor<8x8x4xf32>) {
  ^bb0(%x: f32, %m: f32, %unused: f32):
    %y = arith.mulf %x, %m : f32
    linalg.yield %y : f32
  } -> tensor<8x8x4xf32>
  return %out : tensor<8x8x4xf32>
}
