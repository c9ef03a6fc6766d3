#define _POSIX_C_SOURCE 199309L
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include <string.h>
#include <math.h>
#define A 48
#define O 24
static float *s, *r, *ea, *eo, *ref;
/* s layout (a,i,b,j): off = a*27648 + b*24 + i*1152 + j ; r layout (a,b,i,j) */
void v0(void){
  #pragma omp parallel
  {
  #pragma omp for schedule(dynamic,1) collapse(2)
  for (long t0=0;t0<48;t0++) for(long t1=0;t1<3;t1++){
    long b1=t1*16,e1=b1+16;
    for(long d0=t0;d0<t0+1;d0++) for(long d1=b1;d1<e1;d1++) for(long d3=0;d3<24;d3++)
      #pragma omp simd
      for(long d2=0;d2<24;d2++)
        r[d0*27648+d1*576+d2*24+d3]=(s[d0*27648+d1*24+d2*1152+d3]+s[d1*27648+d0*24+d3*1152+d2])/(((ea[d0]+ea[d1])-eo[d2])-eo[d3]);
  }}
}
void v1(void){
  #pragma omp parallel
  {
  #pragma omp for schedule(dynamic,1) collapse(2)
  for (long t0=0;t0<48;t0++) for(long t1=0;t1<3;t1++){
    long b1=t1*16,e1=b1+16;
    for(long d0=t0;d0<t0+1;d0++) for(long d1=b1;d1<e1;d1++) for(long d2=0;d2<24;d2++)
      #pragma omp simd
      for(long d3=0;d3<24;d3++)
        r[d0*27648+d1*576+d2*24+d3]=(s[d0*27648+d1*24+d2*1152+d3]+s[d1*27648+d0*24+d3*1152+d2])/(((ea[d0]+ea[d1])-eo[d2])-eo[d3]);
  }}
}
/* v2: stage the transposed operand's block through a small buffer (transposing copy), then contiguous */
void v2(void){
  #pragma omp parallel
  {
  float buf[24*24] __attribute__((aligned(64)));
  #pragma omp for schedule(dynamic,1) collapse(2)
  for (long t0=0;t0<48;t0++) for(long t1=0;t1<3;t1++){
    long b1=t1*16,e1=b1+16;
    for(long d0=t0;d0<t0+1;d0++) for(long d1=b1;d1<e1;d1++){
      /* buf[d2][d3] = s[d1,d0,d3,d2]: read rows d3 contiguous along d2 */
      for(long d3=0;d3<24;d3++)
        #pragma omp simd
        for(long d2=0;d2<24;d2++) buf[d2*24+d3]=s[d1*27648+d0*24+d3*1152+d2];
      for(long d2=0;d2<24;d2++)
        #pragma omp simd
        for(long d3=0;d3<24;d3++)
          r[d0*27648+d1*576+d2*24+d3]=(s[d0*27648+d1*24+d2*1152+d3]+buf[d2*24+d3])/(((ea[d0]+ea[d1])-eo[d2])-eo[d3]);
    }
  }}
}
/* v3: tile over (d0,d1) pairs both 8 -> transposed block read contiguous runs of 8*24? keep simple: d1 innermost tile loop outer */
void v3(void){
  #pragma omp parallel
  {
  #pragma omp for schedule(dynamic,1) collapse(2)
  for (long t0=0;t0<2;t0++) for(long t2=0;t2<6;t2++){
    long b0=t0*32,e0=b0+32<48?b0+32:48; long b2=t2*4,e2=b2+4;
    for(long d0=b0;d0<e0;d0++) for(long d2=b2;d2<e2;d2++) for(long d1=0;d1<48;d1++)
      #pragma omp simd
      for(long d3=0;d3<24;d3++)
        r[d0*27648+d1*576+d2*24+d3]=(s[d0*27648+d1*24+d2*1152+d3]+s[d1*27648+d0*24+d3*1152+d2])/(((ea[d0]+ea[d1])-eo[d2])-eo[d3]);
  }}
}
/* v4: best-plan tiles, nest d0,d1,d2,d3 */
void v4(void){
  #pragma omp parallel
  {
  #pragma omp for schedule(dynamic,1) collapse(2)
  for (long t0=0;t0<2;t0++) for(long t2=0;t2<6;t2++){
    long b0=t0*32,e0=b0+32<48?b0+32:48; long b2=t2*4,e2=b2+4;
    for(long d0=b0;d0<e0;d0++) for(long d1=0;d1<48;d1++) for(long d2=b2;d2<e2;d2++)
      #pragma omp simd
      for(long d3=0;d3<24;d3++)
        r[d0*27648+d1*576+d2*24+d3]=(s[d0*27648+d1*24+d2*1152+d3]+s[d1*27648+d0*24+d3*1152+d2])/(((ea[d0]+ea[d1])-eo[d2])-eo[d3]);
  }}
}
double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
int main(){
  long n=(long)A*A*O*O;
  s=aligned_alloc(64,n*4); r=aligned_alloc(64,n*4); ref=malloc(n*4); ea=malloc(A*4); eo=malloc(O*4);
  for(long i=0;i<n;i++) s[i]=(float)rand()/RAND_MAX;
  for(int i=0;i<A;i++) ea[i]=1+(float)rand()/RAND_MAX;
  for(int i=0;i<O;i++) eo[i]=-1-(float)rand()/RAND_MAX;
  void (*f[5])(void)={v0,v1,v2,v3,v4};
  v0(); memcpy(ref,r,n*4);
  for(int k=1;k<5;k++){ memset(r,0,n*4); f[k](); double e=0; for(long i=0;i<n;i++) e=fmax(e,fabs(r[i]-ref[i])); printf("v%d maxerr %g\n",k,e);}
  double best[5]={1e9,1e9,1e9,1e9,1e9};
  for(int round=0;round<15;round++) for(int k=0;k<5;k++){ double t=now(); for(int rep=0;rep<5;rep++) f[k](); t=(now()-t)/5; if(t<best[k]) best[k]=t; }
  for(int k=0;k<5;k++) printf("v%d %.3f ms\n",k,best[k]*1e3);
}
