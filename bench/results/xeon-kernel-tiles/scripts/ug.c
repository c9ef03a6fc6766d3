#include KSRC
#include <stdio.h>
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char**argv){
  long M=atol(argv[1]),N=atol(argv[2]),K=atol(argv[3]), reps=atol(argv[4]);
  T *A=aligned_alloc(64,M*K*4),*B=aligned_alloc(64,K*N*4),*C=aligned_alloc(64,M*N*4);
  for(long i=0;i<M*K;i++)A[i]=1e-3f*(i%7); for(long i=0;i<N*K;i++)B[i]=1e-3f*(i%5);
  long d[13]={1,M,N,K, M*K,K,1, K*N,N,1, M*N,N,1};
  double best=1e9;
  for(int r=0;r<7;r++){ double t0=now();
    for(long q=0;q<reps;q++) gemm_kernel(A,B,C,d,1.0,0);
    double t=(now()-t0)/reps; if(t<best)best=t;}
  printf("%ldx%ldx%ld: %.3f ms %.1f GF/s\n",M,N,K,best*1e3,2.0*M*N*K/best/1e9);
}
