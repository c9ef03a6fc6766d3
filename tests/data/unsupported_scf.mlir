// A loop: not linalg on tensors, so import-mlir refuses it (the scf.for is on line 6).
func.func @loop(%x: tensor<8xf32>) -> tensor<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %y = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %x) -> (tensor<8xf32>) {
    scf.yield %acc : tensor<8xf32>
  }
  return %y : tensor<8xf32>
}
