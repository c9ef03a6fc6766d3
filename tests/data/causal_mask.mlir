// Causal attention for one head, as a compiler writes it with the mask in the bodies:
// arith.cmpi on linalg.index values feeding arith.select (the workload language's
// where(COND, A, B)).  The scores are masked to -1e30 above the diagonal (j > i); the
// exponentials are zeroed there again through an index sum (j < i + 1 is false), and the
// weighted sum of v masks its own reduction index (j - 1 < i, compared after an index_cast to
// i64), so every form of condition the importer reads appears once.
#qk_q = affine_map<(i, j, d) -> (i, d)>
#qk_k = affine_map<(i, j, d) -> (j, d)>
#qk_s = affine_map<(i, j, d) -> (i, j)>
#id2 = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (i)>
#pv_p = affine_map<(i, d, j) -> (i, j)>
#pv_v = affine_map<(i, d, j) -> (j, d)>
#pv_l = affine_map<(i, d, j) -> (i)>
#pv_o = affine_map<(i, d, j) -> (i, d)>
func.func @causal(%q: tensor<8x4xf32>, %k: tensor<8x4xf32>, %v: tensor<8x4xf32>)
    -> tensor<8x4xf32> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %big = arith.constant -1.0e30 : f32
  %scale = arith.constant 0.5 : f32
  %c1 = arith.constant 1 : index
  %e88 = tensor.empty() : tensor<8x8xf32>
  %e8 = tensor.empty() : tensor<8xf32>
  %e84 = tensor.empty() : tensor<8x4xf32>
  %z88 = linalg.fill ins(%zero : f32) outs(%e88 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %s = linalg.generic {indexing_maps = [#qk_q, #qk_k, #qk_s],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<8x4xf32>, tensor<8x4xf32>) outs(%z88 : tensor<8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %ab = arith.mulf %a, %b : f32
    %abs = arith.mulf %ab, %scale : f32
    %r = arith.addf %o, %abs : f32
    linalg.yield %r : f32
  } -> tensor<8x8xf32>
  %t = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<8x8xf32>) outs(%e88 : tensor<8x8xf32>) {
  ^bb0(%x: f32, %unused: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %keep = arith.cmpi ule, %j, %i : index
    %y = arith.select %keep, %x, %big : f32
    linalg.yield %y : f32
  } -> tensor<8x8xf32>
  %minf = linalg.fill ins(%ninf : f32) outs(%e8 : tensor<8xf32>) -> tensor<8xf32>
  %m = linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
      ins(%t : tensor<8x8xf32>) outs(%minf : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.maximumf %o, %x : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %p = linalg.generic {indexing_maps = [#id2, #row, #id2],
                       iterator_types = ["parallel", "parallel"]}
      ins(%t, %m : tensor<8x8xf32>, tensor<8xf32>) outs(%e88 : tensor<8x8xf32>) {
  ^bb0(%x: f32, %mx: f32, %unused: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %i1 = arith.addi %i, %c1 : index
    %below = arith.cmpi slt, %j, %i1 : index
    %d = arith.subf %x, %mx : f32
    %e = math.exp %d : f32
    %y = arith.select %below, %e, %zero : f32
    linalg.yield %y : f32
  } -> tensor<8x8xf32>
  %z8 = linalg.fill ins(%zero : f32) outs(%e8 : tensor<8xf32>) -> tensor<8xf32>
  %l = linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
      ins(%p : tensor<8x8xf32>) outs(%z8 : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.addf %o, %x : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %z84 = linalg.fill ins(%zero : f32) outs(%e84 : tensor<8x4xf32>) -> tensor<8x4xf32>
  %out = linalg.generic {indexing_maps = [#pv_p, #pv_v, #pv_l, #pv_o],
                         iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%p, %v, %l : tensor<8x8xf32>, tensor<8x4xf32>, tensor<8xf32>)
      outs(%z84 : tensor<8x4xf32>) {
  ^bb0(%pp: f32, %vv: f32, %ll: f32, %o: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 2 : index
    %i64 = arith.index_cast %i : index to i64
    %j64 = arith.index_cast %j : index to i64
    %one = arith.constant 1 : i64
    %jm1 = arith.subi %j64, %one : i64
    %seen = arith.cmpi slt, %jm1, %i64 : i64
    %pv = arith.mulf %pp, %vv : f32
    %w = arith.divf %pv, %ll : f32
    %y = arith.select %seen, %w, %zero : f32
    %r = arith.addf %o, %y : f32
    linalg.yield %r : f32
  } -> tensor<8x4xf32>
  return %out : tensor<8x4xf32>
}
