// Corner cases: an input with a size-1 dim (read through a collapse and through a constant-0
// indexing map), a matmul accumulating into an argument (a second statement adds the init),
// a private callee (inlined), powf with a constant integer exponent, the same value returned
// twice, and an argument returned as is.
func.func private @cube(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %three = arith.constant 3.0 : f32
  %y = linalg.map ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) (%u: f32, %o: f32) {
    %v = math.powf %u, %three : f32
    linalg.yield %v : f32
  }
  return %y : tensor<8xf32>
}
func.func @edges(%x: tensor<1x8xf32>, %a: tensor<8x4xf32>, %b: tensor<4x6xf32>,
                 %c: tensor<8x6xf32>)
    -> (tensor<8xf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x4xf32>, tensor<8xf32>) {
  %xc = tensor.collapse_shape %x [[0, 1]] : tensor<1x8xf32> into tensor<8xf32>
  %e = tensor.empty() : tensor<8xf32>
  %y = linalg.map ins(%xc : tensor<8xf32>) outs(%e : tensor<8xf32>) (%u: f32, %o: f32) {
    %v = math.exp %u : f32
    linalg.yield %v : f32
  }
  %mm = linalg.matmul ins(%a, %b : tensor<8x4xf32>, tensor<4x6xf32>)
                      outs(%c : tensor<8x6xf32>) -> tensor<8x6xf32>
  %z = linalg.generic {indexing_maps = [affine_map<(d0) -> (0, d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%x : tensor<1x8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%u: f32, %o: f32):
    %t = math.tanh %u : f32
    linalg.yield %t : f32
  } -> tensor<8xf32>
  %zc = func.call @cube(%z) : (tensor<8xf32>) -> tensor<8xf32>
  return %y, %mm, %mm, %a, %zc : tensor<8xf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x4xf32>, tensor<8xf32>
}
