package cpu

// gemm computes c = alpha*op(a)*op(b) + beta*c as device.Kernels.Gemm does,
// on the team's threads.
//
// Every element of C is computed the same way on every path: C is scaled
// by beta in float32 (set to zero when beta is 0, so that garbage in C is
// never read), then for l = 0..k-1 in order the product alpha*op(A)[i,l]
// (rounded) times op(B)[l,j] is rounded and added. So an element's bits
// depend only on its row of op(A) and its column of op(B): not on the
// batch around it (a sharded evaluation scores an example as the whole
// test set does), not on the thread count, not on which path ran. The
// plain loop (gemmLoop) is the definition; the blocked product of 4×16
// tiles (kern4x16, in AVX assembly on amd64) computes the same sequence
// eight lanes at a time, with separate multiplies and adds: a fused
// multiply-add would round differently. On AMD's Zen cores, which add and
// multiply on separate pipes, that costs no throughput.
//
// A product is split into parts along the larger of C's two dimensions
// (rows in multiples of 4, columns in multiples of 16), at most
// partsPerThread parts per thread, only when each part has at least
// gemmGrain multiply-adds and only a product of at least minSplitWork. A transposed B is copied into k×n order (gemmTask.bt,
// made when the kernel is enqueued), so that the tiles read B's rows
// contiguously; then the split is by columns, and each part copies the
// columns it computes, so no part waits for another.
type gemmTask struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        []float32
	bt             []float32 // op(B) in k×n order when transB
	byRows         bool
	// tile is the width of a tile's columns: 32 with the AVX-512 kernel
	// (kern4x32), else 16. Either gives the same bits.
	tile int
	// narrow runs 16-wide tiles of 8 rows in AVX-512 (kern8x16): for C
	// under 32 columns on a CPU that has it.
	narrow bool
	// ct is C transposed (n×m), where a weight gradient runs as Cᵀ =
	// op(B)ᵀ·op(A)ᵀ (see transposedProduct); nil otherwise.
	ct []float32
	// packer packs all of a transposed B before a split by rows.
	packer *gemmPacker
}

// gemmPacker is the first pass of a product with a transposed B split by
// rows: parts of op(B)'s columns, packed into gemmTask.bt.
type gemmPacker struct{ g *gemmTask }

func (p *gemmPacker) part(i, parts int, _ *scratch) {
	lo, hi := span(i, parts, p.g.n, 8)
	p.g.pack(lo, hi)
}

// gemmGrain is the least work (multiply-adds) worth a part of its own:
// below it, handing the part to another thread costs more than it saves.
const gemmGrain = 1 << 15

// minSplitWork is the least work (multiply-adds) of a product split
// between threads at all; a smaller one runs whole on the stream's
// goroutine. Splitting one costs a hand-off to a helper and a wait for
// it: a fraction of a microsecond on a quiet machine, but up to a
// scheduler's time slice when another process holds the helper's core,
// while a product this small takes 2-6 µs on one thread. Measured with
// BenchmarkGemmThreads and BenchmarkGemmSplit on the 2-core development
// machine (docs/cpu-results.md, "Where a product is split"): split in
// two, the output layer's products at batch 64 (82K multiply-adds) ran
// 1.12-1.5x one thread's speed on a quiet machine, 0.87-1.25x at a load
// average of 4-5 and 0.13-0.23x at 6-7; at batch 128 (164K), 0.82-1.08x
// at 4-5; from 256K on (batch 256's, a 64x64x64), 1.12-1.63x at 4-5.
const minSplitWork = 1 << 18

func newGemmTask(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) *gemmTask {
	g := &gemmTask{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta, a: a, b: b, c: c, tile: 16}
	if haveWideKernel() && n >= 32 {
		// A narrower C would leave most of a 32-wide tile's lanes idle.
		g.tile = 32
	}
	// C no wider than a tile has one column of tiles, so only its rows
	// split (a convolution's weight gradient: a few rows, long sums).
	g.byRows = !transB && (m >= n || n <= g.tile)
	g.narrow = haveWideKernel() && g.tile == 16
	if transB && g.blocked() {
		g.bt = make([]float32, n*k)
		// A product in bands (a convolution's column gradient) splits
		// by rows too, once the whole of op(B) is packed.
		g.byRows = g.bands()
		g.packer = &gemmPacker{g}
	}
	if g.transposedProduct() {
		g.ct = make([]float32, m*n)
	}
	return g
}

// blocked says whether the product runs in tiles rather than in the plain
// loop: tiny products, and those with alpha other than 1 (nothing in
// tolaria scales a product), run in the loop.
func (g *gemmTask) blocked() bool {
	return g.alpha == 1 && g.k > 0 && g.m*g.n*g.k > smallGemm
}

func (g *gemmTask) run(t *team) {
	if !g.blocked() {
		gemmLoop(g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.b, g.beta, g.c)
		return
	}
	m, n := g.m, g.n
	if g.beta != 0 && g.beta != 1 {
		scale(g.c[:m*n], g.beta)
	}
	if g.byRows && g.ct == nil && g.transB {
		t.run(g.packer, min(t.parts(n*g.k, elemGrain), (n+7)/8))
	}
	t.run(g, g.parts(t))
}

// parts is how many parts a blocked product splits into on t's threads:
// one for a product under minSplitWork, else one per gemmGrain of work,
// at most partsPerThread per thread, and no more than C has rows of 4
// (or, split by columns, columns of a tile).
func (g *gemmTask) parts(t *team) int {
	if g.m*g.n*g.k < minSplitWork {
		return 1
	}
	dim, align, most := g.n, g.tile, g.m*g.n
	switch {
	case g.ct != nil:
		dim, align, most = g.m, 32, transposedParts*t.threads()
	case g.byRows:
		dim, align = g.m, 4
	}
	return min(t.parts(g.m*g.n*g.k, gemmGrain), (dim+align-1)/align, most)
}

func (g *gemmTask) part(i, parts int, s *scratch) {
	if g.ct != nil {
		lo, hi := span(i, parts, g.m, 32)
		g.blockTransposed(lo, hi, s)
		return
	}
	if g.byRows {
		lo, hi := span(i, parts, g.m, 4)
		g.block(lo, hi, 0, g.n, s)
		return
	}
	lo, hi := span(i, parts, g.n, g.tile)
	if g.transB && !g.packsFromB() {
		g.pack(lo, hi)
	}
	g.block(0, g.m, lo, hi, s)
}

// packsFromB says whether a split by columns with a transposed B packs its
// panels straight from B, transposing kc×32 blocks, with no copy into bt:
// where all of C's rows run in packed blocks of 4-row tiles, none left to
// g.row. bt's copy writes each l of a column 4n bytes apart, a page or
// more for the n of packed blocks, once more than the panels need.
func (g *gemmTask) packsFromB() bool {
	return haveKernel() && g.packs(g.m) && g.m%4 == 0
}

// The cache blocking of large products. A tile reads its 16 columns of B
// for every l: with B's rows n floats apart, each l is another cache line
// and, from n = 1024 on, another page, so a long k runs out of the L1
// cache and the TLB, and every row of tiles reads the panel from memory
// again. So a part at least packRows rows tall computes its C in k-blocks
// of gemmKC: for each block and each 16 columns it copies that panel of B
// (gemmKC×16, 16 KiB) into the thread's scratch, where it stays in L1 for
// the gemmMC rows of tiles that use it, while those rows' gemmKC-long
// stretch of A (at most 256 KiB) stays in L2. Between k-blocks a tile
// stores its sums to C and the next block loads them: a float32 store and
// load change no bits, so each element still adds its products in l order,
// as gemmLoop does. A transposed A has the same trouble when m is large
// (its rows of op(A) are columns, m floats apart for each l), so then its
// block of gemmMC rows by gemmKC is copied too, each 4 rows of a tile
// interleaved by l.
const (
	gemmKC   = 256
	gemmMC   = 256
	packRows = 16
)

// pack copies the rows j0..j1 of the n×k b into the columns j0..j1 of the
// k×n bt, eight rows at a time, so that each l writes 32 contiguous bytes.
func (g *gemmTask) pack(j0, j1 int) {
	n, k, b, bt := g.n, g.k, g.b, g.bt
	j := j0
	for ; j+8 <= j1; j += 8 {
		r0, r1, r2, r3 := b[j*k:(j+1)*k], b[(j+1)*k:(j+2)*k], b[(j+2)*k:(j+3)*k], b[(j+3)*k:(j+4)*k]
		r4, r5, r6, r7 := b[(j+4)*k:(j+5)*k], b[(j+5)*k:(j+6)*k], b[(j+6)*k:(j+7)*k], b[(j+7)*k:(j+8)*k]
		for l := range k {
			d := bt[l*n+j : l*n+j+8 : l*n+j+8]
			d[0], d[1], d[2], d[3] = r0[l], r1[l], r2[l], r3[l]
			d[4], d[5], d[6], d[7] = r4[l], r5[l], r6[l], r7[l]
		}
	}
	for ; j < j1; j++ {
		for l, v := range b[j*k : (j+1)*k] {
			bt[l*n+j] = v
		}
	}
}

// block computes the rows i0..i1 and columns j0..j1 of C, with s as
// scratch for packed panels.
func (g *gemmTask) block(i0, i1, j0, j1 int, s *scratch) {
	m, k := g.m, g.k
	b := g.b
	if g.transB {
		b = g.bt
	}
	aAt, rs, cs := k, 4*k, 4 // op(A)[i,l] = a[i*aAt + l*cs/4]
	if g.transA {
		aAt, rs, cs = 1, 4, 4*m
	}
	load := g.beta != 0
	// mask[16-w:] starts with w lanes of ones: the columns of a tile of w.
	var mask [32]int32
	for j := range 16 {
		mask[j] = -1
	}
	kernel := haveKernel()
	if kernel && s != nil && g.packs(i1-i0) {
		g.blockPacked(i0, i1, j0, j1, b, s, aAt, rs, cs, load, &mask)
		return
	}
	// A tall product whose B fits in the L2 cache runs in bands of rows,
	// each band's columns one after another, so that the band's rows of A
	// stay in L1 for all of B's columns rather than coming from memory
	// once for every column of tiles.
	band := i1 - i0
	if g.bands() {
		band = max(8, bandFloats/k/8*8)
	}
	for ib := i0; ib < i1; ib += band {
		ie := min(i1, ib+band)
		for jt := j0; jt < j1; jt += g.tile {
			g.column(ib, ie, jt, min(g.tile, j1-jt), b, aAt, rs, cs, load, &mask)
		}
	}
}

// bandFloats is the size of a band of A's rows (16 KiB), half the L1 data
// cache; bandB is the most of B (512 KiB) that bands leave in the L2 cache
// of 1 MiB, and bandA the least of A (1 MiB) for which bands pay: under
// it, A stays in L2 whatever the order.
const (
	bandFloats = 4096
	bandB      = 1 << 17
	bandA      = 1 << 16
)

// bands says whether block runs in bands of rows: for products of A taller
// than L2 and B within it, with more than one column of tiles (a
// convolution's forward product and its columns' gradient).
func (g *gemmTask) bands() bool {
	return g.m*g.k >= bandA && g.k*g.n <= bandB && g.n > g.tile
}

// column computes the rows i0..i1 of C's tile of w columns at jt, in the
// widest tiles this machine has, then one row at a time.
func (g *gemmTask) column(i0, i1, jt, w int, b []float32, aAt, rs, cs int, load bool, mask *[32]int32) {
	n, k, tw := g.n, g.k, g.tile
	kernel := haveKernel()
	i := i0
	for ; kernel && tw == 32 && i+8 <= i1; i += 8 {
		kern8x32(&g.a[i*aAt], uintptr(rs), uintptr(cs), &b[jt], uintptr(4*n), &g.c[i*n+jt], uintptr(4*n), k, load, columns(w))
	}
	for ; kernel && tw == 16 && g.narrow && i+8 <= i1; i += 8 {
		kern8x16(&g.a[i*aAt], uintptr(rs), uintptr(cs), &b[jt], uintptr(4*n), &g.c[i*n+jt], uintptr(4*n), k, load, columns(w))
	}
	for ; kernel && i+4 <= i1; i += 4 {
		a, c := &g.a[i*aAt], &g.c[i*n+jt]
		if tw == 32 {
			kern4x32(a, uintptr(rs), uintptr(cs), &b[jt], uintptr(4*n), c, uintptr(4*n), k, load, columns(w))
		} else if w == 16 {
			kern4x16(a, uintptr(rs), uintptr(cs), &b[jt], uintptr(4*n), c, uintptr(4*n), k, load)
		} else {
			kern4x16Masked(a, uintptr(rs), uintptr(cs), &b[jt], uintptr(4*n), c, uintptr(4*n), k, load, &mask[16-w])
		}
	}
	for ; i < i1; i++ {
		if !kernel {
			g.row(i, jt, jt+w, b)
			continue
		}
		// The rows under a tile's height: a 4-row tile whose rows are
		// all row i (A's row step and C's are 0) computes it four
		// times, each time with the same bits, faster than g.row.
		a, c := &g.a[i*aAt], &g.c[i*n+jt]
		if tw == 32 {
			kern4x32(a, 0, uintptr(cs), &b[jt], uintptr(4*n), c, 0, k, load, columns(w))
		} else if w == 16 {
			kern4x16(a, 0, uintptr(cs), &b[jt], uintptr(4*n), c, 0, k, load)
		} else {
			kern4x16Masked(a, 0, uintptr(cs), &b[jt], uintptr(4*n), c, 0, k, load, &mask[16-w])
		}
	}
}

// A convolution's weight gradient, Xᵀ·dY (X the m columns of im2col, dY
// the n output channels, k = every output pixel of the batch), is a long
// sum into a small C. As op(A)·op(B) its tiles broadcast A's elements from
// columns m floats apart and need B's panels packed, once for every part.
// So it runs as its transpose, Cᵀ = dYᵀ·X: a tile broadcasts 8 channels of
// a row of dY (one cache line) and multiplies 32 contiguous columns of a
// row of X, both read in place, and each part, a range of X's columns,
// reads its stripe of X once. Each element still adds the same products
// (dY[l,j]·X[l,i] is X[l,i]·dY[l,j]: a float32 product does not depend on
// its operands' order) in l order, so the bits are gemmLoop's.
//
// transposedKC is the length of a k-block: a tile's panel of X (kc×32
// floats) and the packed dY (kc×n) stay in the L1 cache for all of Cᵀ;
// measured on the CNN's two shapes, 64 ran 5-10% faster than 128.
// transposedParts bounds the parts per thread, as every part reads the
// whole of dY: on 2 threads of the development machine, busy with other
// work, one part per thread ran the batch-256 288×50176×64 in 33-38 ms,
// against 42-44 with two and 59-61 with four.
const (
	transposedKC    = 64
	transposedParts = 1
)

// transposedProduct says whether the product runs as Cᵀ = op(B)ᵀ·op(A)ᵀ:
// a transposed A with a long sum, on a machine with the 32-wide tiles,
// and C at least as tall as it is wide, so that Cᵀ's rows fill the tiles.
func (g *gemmTask) transposedProduct() bool {
	return g.transA && !g.transB && g.k >= longK && g.m >= g.n && haveWideKernel() && g.blocked()
}

// blockTransposed computes the rows i0..i1 of C (columns of Cᵀ) in ct,
// with s as scratch for each k-block's dY, packed 8 channels by kc: in
// place, a tile's 8 channels run down dY's rows n floats apart (256 bytes
// for 64 channels), which fall in a quarter of the L1 cache's sets.
func (g *gemmTask) blockTransposed(i0, i1 int, s *scratch) {
	m, n, k, ct := g.m, g.n, g.k, g.ct
	if g.beta != 0 {
		for i := i0; i < i1; i++ {
			for j, v := range g.c[i*n : (i+1)*n] {
				ct[j*m+i] = v
			}
		}
	}
	ldc, lda := uintptr(4*m), uintptr(4*n)
	n8 := n / 8 * 8
	for l0 := 0; l0 < k; l0 += transposedKC {
		kc := min(transposedKC, k-l0)
		load := g.beta != 0 || l0 > 0
		// Tile j's 8 channels go to pack[j*kc:], l by l.
		pack := s.packA
		for l := range kc {
			row := g.b[(l0+l)*n : (l0+l)*n+n8]
			for j := 0; j < n8; j += 8 {
				*(*[8]float32)(pack[j*kc+l*8:]) = *(*[8]float32)(row[j:])
			}
		}
		for it := i0; it < i1; it += 32 {
			mask, x := columns(min(32, i1-it)), &g.a[l0*m+it]
			for j := 0; j < n8; j += 8 {
				kern8x32(&pack[j*kc], 4, 32, x, ldc, &ct[j*m+it], ldc, kc, load, mask)
			}
			dy := g.b[l0*n:]
			for j := n8; j < n; j++ {
				kern4x32(&dy[j], 0, lda, x, ldc, &ct[j*m+it], 0, kc, load, mask)
			}
		}
	}
	for i := i0; i < i1; i++ {
		c := g.c[i*n : (i+1)*n]
		for j := range c {
			c[j] = ct[j*m+i]
		}
	}
}

// packs says whether a part of the given rows runs in packed blocks: only
// where B's rows are a page apart or more (n >= 1024), or a transposed A's
// columns are, and the part is tall enough to use each panel often.
// Measured on the MLP's shapes, smaller products (B within the L2 cache,
// read at a constant stride the prefetchers follow) run faster in the
// plain tiles, packing costing more than it saves.
func (g *gemmTask) packs(rows int) bool {
	return rows >= packRows && (g.n >= 1024 || g.transA && (g.m >= 1024 || g.k >= longK))
}

// longK is the length of sum from which a transposed A's product runs in
// packed blocks whatever its size: a convolution's weight gradient sums
// over every output pixel of the batch, and without k-blocks each row of
// tiles reads the whole of B (the output gradient, megabytes) again.
const longK = 4096

// blockPacked is block for parts tall enough to pack panels of B (see
// gemmKC); b is op(B) in k×n order.
func (g *gemmTask) blockPacked(i0, i1, j0, j1 int, b []float32, s *scratch, aAt, rs, cs int, load bool, mask *[32]int32) {
	m, n, k := g.m, g.n, g.k
	pack := s.pack
	// A transposed A is packed only when its columns are a page apart or
	// more (m >= 1024 floats) and the block serves several panels of B:
	// measured on the MLP's shapes, packing it otherwise costs more than
	// it saves.
	packA := g.transA && m >= 1024 && j1-j0 > 64
	tiled := i0 + (i1-i0)/4*4
	// A panel of B stays gemmKC×16 floats (16 KiB): wider tiles take
	// shorter k-blocks.
	tw := g.tile
	kcMax := gemmKC * 16 / tw
	for l0 := 0; l0 < k; l0 += kcMax {
		kc := min(kcMax, k-l0)
		ld := load || l0 > 0
		for ib := i0; ib < tiled; ib += gemmMC {
			ie := min(tiled, ib+gemmMC)
			if packA {
				// Tile t's rows go to packA[t*4*kc:], l by l.
				pa := s.packA
				for i := ib; i < ie; i += 4 {
					d := pa[(i-ib)*kc : (i-ib+4)*kc]
					for l := range kc {
						src := g.a[(l0+l)*m+i : (l0+l)*m+i+4]
						copy(d[l*4:l*4+4], src)
					}
				}
			}
			for jt := j0; jt < j1; jt += tw {
				w := min(tw, j1-jt)
				switch {
				case g.transB && g.packsFromB():
					for jj := range w {
						for l, v := range g.b[(jt+jj)*k+l0 : (jt+jj)*k+l0+kc] {
							pack[l*tw+jj] = v
						}
					}
				case w == 16 && tw == 16:
					for l := range kc {
						*(*[16]float32)(pack[l*16:]) = *(*[16]float32)(b[(l0+l)*n+jt:])
					}
				case w == 32:
					for l := range kc {
						*(*[32]float32)(pack[l*32:]) = *(*[32]float32)(b[(l0+l)*n+jt:])
					}
				default:
					for l := range kc {
						copy(pack[l*tw:l*tw+w], b[(l0+l)*n+jt:(l0+l)*n+jt+w])
					}
				}
				i := ib
				for ; tw == 32 && !packA && i+8 <= ie; i += 8 {
					kern8x32(&g.a[i*aAt+l0*(cs/4)], uintptr(rs), uintptr(cs), &pack[0], 128, &g.c[i*n+jt], uintptr(4*n), kc, ld, columns(w))
				}
				for ; i < ie; i += 4 {
					a, ars, acs := &g.a[i*aAt+l0*(cs/4)], rs, cs
					if packA {
						a, ars, acs = &s.packA[(i-ib)*kc], 4, 16
					}
					c := &g.c[i*n+jt]
					if tw == 32 {
						kern4x32(a, uintptr(ars), uintptr(acs), &pack[0], 128, c, uintptr(4*n), kc, ld, columns(w))
					} else if w == 16 {
						kern4x16(a, uintptr(ars), uintptr(acs), &pack[0], 64, c, uintptr(4*n), kc, ld)
					} else {
						kern4x16Masked(a, uintptr(ars), uintptr(acs), &pack[0], 64, c, uintptr(4*n), kc, ld, &mask[16-w])
					}
				}
			}
		}
	}
	for i := tiled; i < i1; i++ {
		for jt := j0; jt < j1; jt += tw {
			g.row(i, jt, min(j1, jt+tw), b)
		}
	}
}

// columns is kern4x32's mask of a tile w columns wide.
func columns(w int) uint32 { return uint32(uint64(1)<<w - 1) }

// row computes C[i, j0..j1] in Go, in the kernels' order; b is op(B) in
// k×n order.
func (g *gemmTask) row(i, j0, j1 int, b []float32) {
	m, n, k := g.m, g.n, g.k
	c := g.c[i*n+j0 : i*n+j1]
	if g.beta == 0 {
		clear(c)
	}
	for l := range k {
		av := g.a[i*k+l]
		if g.transA {
			av = g.a[l*m+i]
		}
		for j, bv := range b[l*n+j0 : l*n+j1] {
			c[j] += float32(av * bv)
		}
	}
}

// smallGemm is the size (multiply-adds) up to which the plain loop runs
// rather than the tiles, whose set-up costs more than such products.
const smallGemm = 4096

// gemmLoop is the plain triple loop: the definition of gemm's result, and
// the path of products too small for tiles. The tiles give the same bits
// (TestGemmAgainstNaive), so which path runs never changes a result.
func gemmLoop(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	// t holds alpha*A[i,:] for the row being computed.
	var tBuf [256]float32
	var t []float32
	if k <= len(tBuf) {
		t = tBuf[:k]
	} else {
		t = make([]float32, k)
	}
	for i := 0; i < m; i++ {
		ci := c[i*n : (i+1)*n]
		switch beta {
		case 0:
			clear(ci)
		case 1:
		default:
			scale(ci, beta)
		}
		if transA {
			for l := range t {
				t[l] = alpha * a[l*m+i]
			}
		} else {
			for l, v := range a[i*k : (i+1)*k] {
				t[l] = alpha * v
			}
		}
		// Each C[i,j] is summed in a register, adding the products in l
		// order; four columns at a time, so that four independent sums
		// hide the latency of each addition. The float32 conversions keep
		// each product rounded on its own: Go may not fuse a multiply and
		// an add across an explicit conversion. A zero product is added
		// like any other, so a NaN or Inf in B shows even where A is 0,
		// as IEEE arithmetic (and cuBLAS) has it. Operands this small sit
		// in L1, so B's stride when it is not transposed costs little.
		bs, bl := k, 1 // B[l,j] = b[j*bs+l*bl]
		if !transB {
			bs, bl = 1, n
		}
		j := 0
		for ; j+4 <= n; j += 4 {
			a0, a1, a2, a3 := ci[j], ci[j+1], ci[j+2], ci[j+3]
			o := j * bs
			for l, tl := range t {
				p := o + l*bl
				a0 += float32(tl * b[p])
				a1 += float32(tl * b[p+bs])
				a2 += float32(tl * b[p+2*bs])
				a3 += float32(tl * b[p+3*bs])
			}
			ci[j], ci[j+1], ci[j+2], ci[j+3] = a0, a1, a2, a3
		}
		for ; j+2 <= n; j += 2 {
			a0, a1 := ci[j], ci[j+1]
			o := j * bs
			for l, tl := range t {
				p := o + l*bl
				a0 += float32(tl * b[p])
				a1 += float32(tl * b[p+bs])
			}
			ci[j], ci[j+1] = a0, a1
		}
		for ; j < n; j++ {
			a0 := ci[j]
			o := j * bs
			for l, tl := range t {
				a0 += float32(tl * b[o+l*bl])
			}
			ci[j] = a0
		}
	}
}
